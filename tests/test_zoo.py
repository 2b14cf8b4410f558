"""The roofline zoo: hand-computed FLOPs and sizes, torch's own saved tensors, the files.

Independent truths used here: arithmetic written out in comments, parameter
counts published for torchvision/HF models, PyTorch autograd itself
(`saved_tensors_hooks` on CPU records what each operator really saves, and a
dispatch mode which operator made each storage), and the numbers the
version-1 zoo committed before the move to cost model v2.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

import planopt
from planopt.budget import keep_all_peak, min_budget
from planopt.errors import InvalidProfileError
from planopt.schedule import OpKind
from planopt.zoo import A100_PCIE4, bert_base, gpt, ops, resnet50, vgg16
from planopt.zoo.build import PROFILES_DIR, SUPERSEDED, ZOO, main, render, rendered
from planopt.zoo.chain import (
    Group,
    Network,
    backward_read_bytes,
    layers,
    products,
    single,
    static_bytes,
)
from planopt.zoo.tensors import FP16, Op, Tensor
from planopt.zoo.transformer import BLOCK_OPS


@pytest.fixture(scope="module")
def zoo() -> dict[str, planopt.Profile]:
    # The bundled hand-written files and the descriptions of models now traced
    # from the real ones (planopt.runtime.bundle): the operator rules on both.
    return {entry.name: entry.profile() for entry in ZOO + SUPERSEDED}


def _layer(profile: planopt.Profile, name: str) -> planopt.Layer:
    (layer,) = [layer for layer in profile.layers if layer.name == name]
    return layer


def _v2(layer: planopt.Layer) -> tuple[int, int, bool, bool, int]:
    """(out_bytes, saved_bytes, saves_input, saves_output, input_grad_bytes)."""
    return (
        layer.out_bytes,
        layer.saved_bytes,
        layer.saves_input,
        layer.saves_output,
        layer.input_grad_bytes,
    )


def _numbers(layer: planopt.Layer) -> tuple:
    """Everything a signature promises to be equal."""
    return (
        layer.fwd,
        layer.bwd,
        *_v2(layer),
        layer.param_grad_bytes,
        layer.fwd_work_bytes,
        layer.bwd_work_bytes,
    )


# -- the roofline formula -------------------------------------------------------


# -- FLOPs by hand --------------------------------------------------------------


def test_conv_flops_by_hand():
    x = Tensor("x", (8, 64, 56, 56))
    conv = ops.conv2d("c", x, 128, 3)
    # 2 * (N*Ho*Wo) * Cout * (Cin*k*k) = 2 * (8*56*56) * 128 * (64*9)
    #                                  = 2 * 25088 * 128 * 576 = 3,699,376,128
    assert conv.fwd_flops == 3_699_376_128
    assert conv.out.shape == (8, 128, 56, 56)
    # weight gradient + data gradient: twice the forward
    assert conv.bwd_flops == 2 * 3_699_376_128
    # a stride-2 7x7 stem on the (static) image batch: no data gradient
    image = Tensor("img", (2, 3, 224, 224), static=True)
    stem = ops.conv2d("stem", image, 64, 7, stride=2, pad=3)
    assert stem.out.shape == (2, 64, 112, 112)  # (224 + 6 - 7) // 2 + 1 = 112
    # 2 * (2*112*112) * 64 * (3*49) = 2 * 25088 * 64 * 147 = 472,055,808
    assert stem.fwd_flops == 472_055_808
    assert stem.bwd_flops == stem.fwd_flops


def test_linear_flops_by_hand():
    x = Tensor("x", (8, 1024, 768))
    fc = ops.linear("fc", x, 3072)
    # 2 * rows * in * out = 2 * 8192 * 768 * 3072 = 38,654,705,664
    assert fc.fwd_flops == 38_654_705_664
    # dW and dX GEMMs (2x) plus the bias-gradient reduction (1 FLOP per output element)
    assert fc.bwd_flops == 2 * 38_654_705_664 + 8192 * 3072
    assert fc.params == 768 * 3072 + 3072


def test_attention_flops_by_hand():
    qkv = Tensor("qkv", (8, 1024, 3 * 768))
    scores = ops.attention_scores("s", qkv, 12, causal=True)
    # q @ k^T per head: 2 * b * h * s * s * dh = 2 * 8 * 12 * 1024 * 1024 * 64
    bmm = 2 * 8 * 12 * 1024 * 1024 * 64
    assert sum(k.flops for k in scores.fwd if k.tensor) == bmm == 12_884_901_888
    assert sum(k.flops for k in scores.bwd if k.tensor) == 2 * bmm


# -- cost model v2 per operator kind, by hand -----------------------------------
#
# Each case chains one operator after a source layer (a 1x1 conv or a linear
# layer on a static batch) and reads the operator's layer from the chain.
# Tiny shapes: x = (2, 4, 6, 6) fp16 = 2*4*36*2 = 576 B; h = (2, 5, 16) fp16
# = 2*5*16*2 = 320 B. Expected: (out_bytes, saved_bytes, saves_input,
# saves_output, input_grad_bytes); the input gradient has x's shape and dtype.


def _level_when_forward_ends(profile: planopt.Profile) -> int:
    """Keep-all device memory once the last forward's frees are done (before any gradient).

    Frees come before allocations at one instant (spec), so it is the lowest
    level the memory curve records at the end of the last forward.
    """
    schedule = planopt.simulate(profile, planopt.Plan.keep_all(profile))
    (end,) = [
        op.end
        for op in schedule.operations()
        if op.kind is OpKind.FORWARD and op.layer == len(profile) - 1
    ]
    levels = zip(schedule.memory_times.tolist(), schedule.memory_bytes.tolist(), strict=True)
    return int(min(level for t, level in levels if t == end))


def _x() -> Op:
    return ops.conv2d("src", Tensor("img", (2, 3, 6, 6), static=True), 4, 1)


def _h(features: int = 16) -> Op:
    return ops.linear("src", Tensor("batch", (2, 5, 16), static=True), features)


def _attention() -> tuple[Op, Op, Op]:
    qkv = _h(48)  # (2, 5, 48) fp16 = 960 B; d = 16, 4 heads of dh = 4
    scores = ops.attention_scores("scores", qkv.out, 4, causal=True)
    return qkv, scores, ops.softmax("softmax", scores.out)


def _case_conv():
    src = _x()
    return (src, ops.conv2d("conv", src.out, 8, 3))


def _case_relu_inplace():
    src = _x()
    return (src, ops.relu("relu", src.out))


def _case_relu():
    src = _x()
    return (src, ops.relu("relu", src.out, inplace=False))


def _case_bn():
    src = _x()
    return (src, ops.batchnorm("bn", src.out))


def _case_maxpool():
    src = _x()
    return (src, ops.maxpool2d("pool", src.out, 2, 2))


def _case_avgpool_1():
    src = _x()
    return (src, ops.adaptive_avgpool("avg", src.out, 1))


def _case_avgpool_3():
    src = _x()
    return (src, ops.adaptive_avgpool("avg", src.out, 3))


def _case_add():
    src = _x()
    branch = ops.relu("branch", src.out, inplace=False)
    return (src, branch, ops.add("add", branch.out, src.out))


def _case_linear():
    src = _h()
    return (src, ops.linear("fc", src.out, 8))


def _case_layernorm():
    src = _h()
    return (src, ops.layernorm("ln", src.out))


def _case_gelu():
    src = _h()
    return (src, ops.gelu("gelu", src.out))


def _case_dropout():
    src = _h()
    return (src, ops.dropout("drop", src.out))


def _case_dropout_add():
    src = _h()
    fc = ops.linear("fc", src.out, 16)
    return (src, fc, ops.dropout_add("residual", fc.out, src.out))


def _case_softmax():
    src = _h()
    return (src, ops.softmax("softmax", src.out))


def _case_scores():
    qkv, scores, _ = _attention()
    return (qkv, scores)


def _case_context():
    qkv, scores, probs = _attention()
    return (qkv, scores, probs, ops.attention_context("context", probs.out, qkv.out, 4))


def _case_embedding():
    ids = Tensor("ids", (2, 5), 8, static=True)
    return (ops.embedding("embed", ids, 16, (50,), positions=5),)


def _case_cross_entropy():
    src = _h(10)  # logits (2, 5, 10) fp16 = 200 B
    return (src, ops.cross_entropy("loss", src.out))


PER_OP = {
    # conv (2,4,6,6) -> (2,8,6,6): out 2*8*36*2 = 1152; saves its input
    "conv": (_case_conv, (1152, 0, True, False, 576)),
    # ReLU saves its output; in place the output is the input's storage, same size
    "relu-inplace": (_case_relu_inplace, (576, 0, False, True, 576)),
    "relu": (_case_relu, (576, 0, False, True, 576)),
    # batch norm: its input, plus mean and invstd fp32 per channel: 2*4*4 = 32
    "batchnorm": (_case_bn, (576, 32, True, False, 576)),
    # max pool 2x2/2: out (2,4,3,3) = 144; its input and int64 indices 2*4*9*8 = 576
    "maxpool": (_case_maxpool, (144, 576, True, False, 576)),
    # average pool to 1x1 is a mean: nothing saved; out (2,4,1,1) = 16
    "avgpool-1": (_case_avgpool_1, (16, 0, False, False, 576)),
    # to 3x3, ATen keeps its input: out (2,4,3,3) = 144
    "avgpool-3": (_case_avgpool_3, (144, 0, True, False, 576)),
    # the residual add saves nothing
    "add": (_case_add, (576, 0, False, False, 576)),
    # linear 16 -> 8: out (2,5,8) = 160; saves its input
    "linear": (_case_linear, (160, 0, True, False, 320)),
    # layer norm: its input, plus mean and rstd fp32 per row: 2 * 10*4 = 80
    "layernorm": (_case_layernorm, (320, 80, True, False, 320)),
    "gelu": (_case_gelu, (320, 0, True, False, 320)),
    # dropout: a bool mask, 1 B per element: 160
    "dropout": (_case_dropout, (320, 160, False, False, 320)),
    "dropout-add": (_case_dropout_add, (320, 160, False, False, 320)),
    "softmax": (_case_softmax, (320, 0, False, True, 320)),
    # q k^T: out (2,4,5,5) fp16 = 400; the q and k copies (2,4,5,4) fp16, 160
    # elements = 320 B each, are internals; its input, the QKV projection (960 B),
    # is not saved
    "attention-scores": (_case_scores, (400, 640, False, False, 960)),
    # probs @ v: out (2,5,16) = 320; saves its input (the probabilities, 400 B)
    # and the v copy (320 B, an internal)
    "attention-context": (_case_context, (320, 320, True, False, 400)),
    # layer 0: its input is the batch (ids, read by its backward), no gradient
    "embedding": (_case_embedding, (320, 0, True, False, 0)),
    # fp32 loss (4 B); fp32 log-probabilities 2*5*10*4 = 400 and total_weight 4
    "cross-entropy": (_case_cross_entropy, (4, 404, False, False, 200)),
}


@pytest.mark.parametrize("kind", sorted(PER_OP))
def test_v2_fields_per_operator_kind_by_hand(kind):
    build, expected = PER_OP[kind]
    chain = layers([single(op) for op in build()], A100_PCIE4)
    assert _v2(chain[-1]) == expected
    assert chain[-1].param_grad_bytes == 0


def test_every_operator_constructor_has_a_case():
    made = {name for name in ops.__all__ if name.islower() and name != "flatten"}
    covered = {
        "conv2d", "relu", "batchnorm", "maxpool2d", "adaptive_avgpool", "add", "linear",
        "layernorm", "gelu", "dropout", "dropout_add", "softmax", "attention_scores",
        "attention_context", "embedding", "cross_entropy",
    }  # fmt: skip
    assert made == covered


def test_a_shared_output_is_counted_once():
    """conv -> ReLU -> conv: the ReLU's output is saved by the ReLU (output) and by the
    next conv (input); it is the ReLU's out_bytes once, with the two flags."""
    src = _x()
    act = ops.relu("relu", src.out, inplace=False)
    conv = ops.conv2d("conv", act.out, 4, 3)
    chain = layers([single(src), single(act), single(conv)], A100_PCIE4)
    assert [_v2(x) for x in chain] == [
        (576, 0, True, False, 0),  # the 1x1 conv saves the (static) images
        (576, 0, False, True, 576),
        (576, 0, True, False, 576),
    ]
    assert backward_read_bytes(chain) == 576  # the ReLU output; src's output nobody reads
    profile = planopt.Profile("c", A100_PCIE4.device(), 0, chain)
    assert _level_when_forward_ends(profile) == 576


def test_a_group_maps_inner_saves_to_internals_and_flags():
    """One layer of conv, batch norm, ReLU: the conv saves the layer's input
    (saves_input), the ReLU its output (saves_output), the batch norm its input
    (the conv output, 1152 B) and statistics (2*8*4 = 64 B): internals."""
    src = _x()
    conv = ops.conv2d("conv", src.out, 8, 3)
    bn = ops.batchnorm("bn", conv.out)
    act = ops.relu("relu", bn.out)
    chain = layers([single(src), Group("block", (conv, bn, act))], A100_PCIE4)
    assert _v2(chain[1]) == (1152, 1152 + 64, True, True, 576)


def test_a_save_the_chain_cannot_hold_is_refused():
    """A tensor saved two layers up whose creator's output no backward reads would be
    freed by the model before its reader runs: refused with the layer named."""
    src = _x()
    mid = ops.relu("mid", src.out, inplace=False)  # saves its output, not src's
    late = ops.conv2d("late", src.out, 4, 1)  # saves src's output, two layers up
    with pytest.raises(InvalidProfileError, match=r"layer 2 \(late\).*src\.out"):
        products([single(src), single(mid), single(late)])


# -- the zoo's layers by hand ---------------------------------------------------


def test_vgg_v2_fields_by_hand(zoo):
    p = zoo["vgg16-b64-a100-pcie4-roofline"]
    big = 64 * 64 * 224 * 224 * 2  # conv1 output, fp16: 411,041,792
    expected = {
        # layer 0: the conv saves the (static) images, the in-place ReLU its output
        "conv1_1+relu": (big, 0, True, True, 0),
        # pool1's input is conv1_2's output, counted there; int64 indices
        # 64*64*112*112*8 = 411,041,792 are its internal; out 64*64*112*112*2
        "pool1": (102_760_448, 411_041_792, True, False, big),
        # conv2_1 saves pool1's output (pool1's out_bytes); own output 64*128*112*112*2
        "conv2_1+relu": (205_520_896, 0, True, True, 102_760_448),
        # avgpool (7x7 -> 7x7) keeps its input, pool5's output 64*512*7*7*2 = 3,211,264
        "avgpool": (3_211_264, 0, True, False, 3_211_264),
        # fc6 saves its input; the ReLU output 64*4096*2 = 524,288 (in place: fc6's
        # output) and the dropout mask 64*4096 = 262,144 are internals; out 524,288
        "fc6+relu+dropout": (524_288, 524_288 + 262_144, True, False, 3_211_264),
        # the fp32 loss; log-probabilities 64*1000*4 = 256,000 and total_weight 4
        "fc8+loss": (4, 256_004, True, False, 524_288),
    }
    for name, fields in expected.items():
        assert _v2(_layer(p, name)) == fields, name


def test_gpt_block_v2_fields_by_hand(zoo):
    p = zoo["gpt-12blk-b8-s1024-h100-pcie5-roofline"]
    act = 8 * 1024 * 768 * 2  # one fp16 (b, s, d) activation: 12,582,912 B
    score = 8 * 12 * 1024 * 1024 * 2  # one fp16 (b, h, s, s) score tensor: 201,326,592 B
    stats = 2 * 8 * 1024 * 4  # mean + rstd, fp32 per row: 65,536 B
    expected = {
        "ln1": (act, stats, True, False, act),  # its input is the block input
        "qkv": (3 * act, 0, True, False, act),
        "scores": (score, 2 * act, False, False, 3 * act),  # q, k copies; QKV not saved
        "softmax": (score, 0, False, True, score),
        "attn_dropout": (score, score // 2, False, False, score),  # bool mask
        "context": (act, act, True, False, score),  # dropped probabilities + v copy
        "attn_out": (act, 0, True, False, act),
        "attn_residual": (act, act // 2, False, False, act),  # bool mask of (b, s, d)
        "ln2": (act, stats, True, False, act),
        "mlp_up": (4 * act, 0, True, False, act),
        "gelu": (4 * act, 0, True, False, 4 * act),
        "mlp_down": (act, 0, True, False, 4 * act),
        "mlp_residual": (act, act // 2, False, False, act),
    }
    for b in (0, 5, 11):
        for op, fields in expected.items():
            assert _v2(_layer(p, f"block{b}.{op}")) == fields, (b, op)
    logits = 8 * 1024 * 50257 * 2  # fp16: 823,410,688
    assert _v2(_layer(p, "lm_head")) == (logits, 0, True, False, act)
    # loss: fp32 scalar; fp32 log-probabilities 8*1024*50257*4 + 0-dim total_weight
    assert _v2(_layer(p, "loss")) == (4, 1_646_821_376 + 4, False, False, logits)
    # embed: the ids (static) are its input; the dropout mask is its internal
    assert _v2(_layer(p, "embed")) == (act, act // 2, True, False, 0)


def test_resnet_v2_fields_by_hand(zoo):
    p = zoo["resnet50-ops-b128-a100-pcie4-roofline"]
    narrow = 128 * 64 * 56 * 56 * 2  # 51,380,224
    wide = 128 * 256 * 56 * 56 * 2  # 205,520,896
    # layer 0: saves the (static) images; no input gradient
    assert _v2(_layer(p, "stem.conv")) == (128 * 64 * 112 * 112 * 2, 0, True, False, 0)
    # bn1 of a stage-2 block: saves its input (conv1's output) + mean, invstd 2*64*4
    assert _v2(_layer(p, "conv2_2.bn1")) == (narrow, 512, True, False, narrow)
    # conv1 saves the block input (relu3's output of the block before)
    assert _v2(_layer(p, "conv2_2.conv1")) == (narrow, 0, True, False, wide)
    # the in-place relu1 saves its output
    assert _v2(_layer(p, "conv2_2.relu1")) == (narrow, 0, False, True, narrow)
    # the residual add saves nothing; relu3 saves its (in-place) output
    assert _v2(_layer(p, "conv2_2.add")) == (wide, 0, False, False, wide)
    assert _v2(_layer(p, "conv2_2.relu3")) == (wide, 0, False, True, wide)
    # the downsample conv saves the block input, which on this chain is not its
    # input (bn3's output is) but the max pool's output, that conv2_1.conv1 reads
    assert _v2(_layer(p, "conv2_1.downsample.conv")) == (wide, 0, False, False, wide)
    # avgpool to 1x1 is a mean: nothing saved; out 128*2048*2, in 128*2048*7*7*2
    assert _v2(_layer(p, "avgpool")) == (524_288, 0, False, False, 25_690_112)

    blocks = zoo["resnet50-blocks-b128-a100-pcie4-roofline"]
    # a bottleneck 256 -> 64 -> 256 at 56x56 as one layer: saves its input (conv1)
    # and output (relu3); internals: conv1, relu1, conv2, relu2 outputs (narrow
    # each), conv3's output (wide, bn3 saves it), the statistics 2*(64+64+256)*4
    assert _v2(_layer(blocks, "conv2_2")) == (
        wide,
        4 * narrow + wide + 3_072,
        True,
        True,
        wide,
    )


def test_static_bytes_by_hand():
    # published parameter counts: torchvision vgg16 138,357,544, resnet50 25,557,032;
    # HF gpt2 124,439,808; HF BertForMaskedLM(bert-base-uncased) 109,514,298
    assert vgg16(1).params == 138_357_544
    assert resnet50(1, per_operator=True).params == 25_557_032
    assert gpt(12, 1, 1024).params == 124_439_808
    assert bert_base(1, 512).params == 109_514_298
    # GPT-12 b8 s1024: 16 B/param (fp16 w + fp16 g + fp32 master + 2 fp32 moments)
    #   124,439,808 * 16 = 1,991,036,928, + ids and labels 2 * 8*1024*8 = 131,072
    assert static_bytes(gpt(12, 8, 1024)) == 1_991_036_928 + 131_072
    # ResNet-50 b128: params * 16 + BN running stats (2 fp32 per BN channel)
    # + images 128*3*224*224*2 + labels 128*8. BN channels: stem 64; per block
    # w + w + 4w, plus 4w for each stage's downsample:
    #   64 + (3*6*64 + 256) + (4*6*128 + 512) + (6*6*256 + 1024) + (3*6*512 + 2048) = 26,560
    assert resnet50(1, per_operator=True).buffer_bytes == 26_560 * 2 * 4
    assert static_bytes(resnet50(128, per_operator=True)) == (
        25_557_032 * 16 + 26_560 * 8 + 128 * 3 * 224 * 224 * 2 + 128 * 8
    )


# -- structure of the chains ----------------------------------------------------


def test_layer_counts():
    assert len(vgg16(2).groups) == 22
    assert len(resnet50(2, per_operator=False).groups) == 18  # stem + 16 blocks + head
    assert len(resnet50(2, per_operator=True).groups) == 175
    assert len(bert_base(2, 64).groups) == 1 + 12 * BLOCK_OPS + 5
    for blocks in (12, 24, 48):
        assert len(gpt(blocks, 1, 64).groups) == 1 + blocks * BLOCK_OPS + 3


@pytest.mark.parametrize(
    ("name", "blocks", "suffix"),
    [
        ("bert-base-b32-s512-h100-pcie5-roofline", 12, 5),
        ("gpt-12blk-b8-s1024-h100-pcie5-roofline", 12, 3),
        ("gpt-24blk-b8-s1024-h100-pcie5-roofline", 24, 3),
        ("gpt-48blk-b8-s1024-h100-pcie5-roofline", 48, 3),
    ],
)
def test_signatures_repeat_block_periodically(zoo, name, blocks, suffix):
    p = zoo[name]
    assert len(p) == 1 + blocks * BLOCK_OPS + suffix
    body = p.layers[1 : 1 + blocks * BLOCK_OPS]
    first = [layer.signature for layer in body[:BLOCK_OPS]]
    assert len(set(first)) >= BLOCK_OPS - 3  # few ops share a shape inside a block
    for b in range(blocks):
        block = body[b * BLOCK_OPS : (b + 1) * BLOCK_OPS]
        assert [layer.signature for layer in block] == first
        assert all(layer.name.startswith(f"block{b}.") for layer in block)
        assert [_numbers(x) for x in block] == [_numbers(x) for x in body[:BLOCK_OPS]]


def test_resnet_blocks_repeat_within_stages(zoo):
    p = zoo["resnet50-blocks-b128-a100-pcie4-roofline"]
    sig = {layer.name: layer.signature for layer in p.layers}
    for stage, blocks in ((2, 3), (3, 4), (4, 6), (5, 3)):
        rest = {sig[f"conv{stage}_{b}"] for b in range(2, blocks + 1)}
        assert len(rest) == 1
        assert sig[f"conv{stage}_1"] not in rest  # the downsampling block differs


def test_equal_signatures_mean_equal_numbers(zoo):
    for name, p in zoo.items():
        seen: dict[str, tuple] = {}
        for layer in p.layers:
            assert seen.setdefault(layer.signature, _numbers(layer)) == _numbers(layer), (
                name,
                layer.name,
            )


def test_block_and_operator_variants_hold_the_same_activations(zoo):
    """The rule between ResNet-50 as 18 blocks and as 175 operators (the same operators).

    1. Same static bytes and compute.
    2. Same activations, each tensor once: the bytes some backward reads
       (`backward_read_bytes`) are equal, and keep-all memory when the forward
       ends is static + those bytes in both.
    3. Keep-all peaks: both in the backward of the last bottleneck (the block
       conv5_3; its operator relu3), where both hold the same activations and
       the same two boundary gradients, of its input and output. The block
       holds its inner gradients besides (its `bwd_work_bytes`), which the
       per-operator chain spreads over one operator at a time: the block
       chain's peak is higher by exactly that.
    """
    blocks = zoo["resnet50-blocks-b128-a100-pcie4-roofline"]
    per_op = zoo["resnet50-ops-b128-a100-pcie4-roofline"]
    assert blocks.static_bytes == per_op.static_bytes
    assert blocks.t_ideal == pytest.approx(per_op.t_ideal, rel=1e-5)  # 6-digit rounding
    activations = backward_read_bytes(blocks.layers)
    assert activations == backward_read_bytes(per_op.layers)
    for p in (blocks, per_op):
        assert _level_when_forward_ends(p) == p.static_bytes + activations
    # products summed without asking who reads them differ: the per-operator chain
    # has an output per operator (bn3's, the add's...), the block chain only its own
    assert sum(x.product_bytes for x in per_op.layers) > sum(x.product_bytes for x in blocks.layers)

    peaks = {}
    for p, top in ((blocks, "conv5_3"), (per_op, "conv5_3.relu3")):
        schedule = planopt.simulate(p, planopt.Plan.keep_all(p))
        (step,) = [
            op
            for op in schedule.operations()
            if op.kind is OpKind.BACKWARD and p.layers[op.layer].name == top
        ]
        assert step.start <= schedule.peak_time < step.end
        peaks[p.name] = schedule.peak_bytes
    # its inner gradients: the add's, of its output and of bn3's, 128*2048*7*7*2 each
    assert _layer(blocks, "conv5_3").bwd_work_bytes == 2 * 25_690_112
    assert peaks[blocks.name] == peaks[per_op.name] + _layer(blocks, "conv5_3").bwd_work_bytes


def test_scratch_counts_what_the_chain_does_not_hold(zoo):
    p = zoo["gpt-12blk-b8-s1024-h100-pcie5-roofline"]
    act = 8 * 1024 * 768 * 2
    score = 8 * 12 * 1024 * 1024 * 2
    # softmax reads its input (the scores layer's output) and writes its output:
    # both are the chain's, as are the gradients of both
    assert (
        _layer(p, "block0.softmax").fwd_work_bytes,
        _layer(p, "block0.softmax").bwd_work_bytes,
    ) == (0, 0)
    # scores: the unmasked scores, a temporary; backward: a score-sized temporary
    # and the q, k gradients
    assert _layer(p, "block0.scores").fwd_work_bytes == score
    assert _layer(p, "block0.scores").bwd_work_bytes == score + 2 * act
    # context reads the QKV projection (3 * act) four layers up, read by no backward,
    # and writes the head-layout result (act); backward: the QKV gradient + two
    # act-sized temporaries
    assert _layer(p, "block0.context").fwd_work_bytes == 3 * act + act
    assert _layer(p, "block0.context").bwd_work_bytes == 3 * act + 2 * act
    # per-operator ResNet: the add reads bn3's output three layers up (no backward
    # reads it), 128*256*56*56*2
    r = zoo["resnet50-ops-b128-a100-pcie4-roofline"]
    assert _layer(r, "conv2_1.add").fwd_work_bytes == 205_520_896
    # as a block, the same tensor is the block's scratch
    b = zoo["resnet50-blocks-b128-a100-pcie4-roofline"]
    assert _layer(b, "conv2_2").fwd_work_bytes == 205_520_896


def test_planning_matters_for_every_zoo_profile(zoo):
    for p in zoo.values():
        assert min_budget(p) < keep_all_peak(p)
        assert p.static_bytes < min_budget(p)


# -- cost model v2 over whole chains ----------------------------------------------


def test_every_saved_tensor_is_counted_once(zoo):
    """The bytes some backward reads are the distinct tensors the operators save
    (by identity, each once), and keep-all holds exactly those when the forward ends."""
    for entry in ZOO + SUPERSEDED:
        net = entry.network()
        saved = {t.key: t for g in net.groups for op in g.ops for t in op.saves if not t.static}
        total = sum(t.nbytes for t in saved.values())
        p = zoo[entry.name]
        assert backward_read_bytes(p.layers) == total, entry.name
        assert _level_when_forward_ends(p) == p.static_bytes + total, entry.name
        chain = products(net.groups)
        internals = [t.key for x in chain for t in x.internals]
        assert len(internals) == len(set(internals))  # an internal of one layer only
        assert not set(internals) & {x.output.key for x in chain}  # and no layer's output


# Flags by what the operator is (autograd's backward formulas): convolution,
# linear, norms, GELU and pooling read their input; ReLU and softmax their
# output; dropout, the residual add and the loss neither (masks and
# log-probabilities are internals). Grouped layers: the first operator decides
# saves_input, the last saves_output.
_FLAGS = (
    (
        r"(conv\d|stem\.conv|qkv|attn_out|ffn_up|ffn_down|mlp_up|mlp_down|fc|lm_head|dense|decoder)",
        True,
        False,
    ),
    (r"(bn\d|stem\.bn|downsample\.bn|ln\d|ln_f|mlm\.ln|gelu|pool\d|maxpool)", True, False),
    (r"(relu\d|stem\.relu|softmax)", False, True),
    (r"(attn_dropout|attn_residual|ffn_residual|mlp_residual|add|loss|scores)", False, False),
    (r"context", True, False),  # it saves its input, the dropped probabilities
    (r"embed", True, False),  # the ids, its (static) input
    (r"conv\d_\d\+relu", True, True),  # VGG: conv saves the input, the ReLU its output
    (r"fc\d\+relu\+dropout|fc8\+loss", True, False),
    (r"conv\d_\d", True, True),  # a bottleneck: conv1 and relu3
    (r"stem", True, False),  # conv on the images ... max pool
    (r"head", False, False),  # 1x1 average pool (a mean) ... loss
    # per-operator ResNet: the downsample conv saves the block input, not its chain
    # input (bn3's output): that tensor is an earlier layer's output conv1 reads
    (r"conv\d_1\.downsample\.conv", False, False),
)


def test_flags_follow_the_operator(zoo):
    for name, p in zoo.items():
        for layer in p.layers:
            if layer.name == "avgpool":  # 7x7 (VGG) keeps its input; 1x1 (ResNet) nothing
                want = [(name.startswith("vgg"), False)]
            else:
                short = (
                    layer.name.split(".", 1)[1] if layer.name.startswith("block") else layer.name
                )
                want = [(i, o) for rule, i, o in _FLAGS if re.fullmatch(rf"(\w+\.)*{rule}", short)]
            assert want == [(layer.saves_input, layer.saves_output)], (name, layer.name)


def test_gradients_have_the_input_shape(zoo):
    """g_i is x_i's gradient: the previous layer's output, same dtype; none for the batch.
    Parameter gradients are in static_bytes, as the source says."""
    for name, p in zoo.items():
        assert p.layers[0].input_grad_bytes == 0
        for below, layer in zip(p.layers, p.layers[1:], strict=False):
            assert layer.input_grad_bytes == below.out_bytes, (name, layer.name)
        assert all(layer.param_grad_bytes == 0 for layer in p.layers)
        assert "param_grad_bytes is 0: parameter gradients are in static_bytes" in p.source


# The zoo's files as committed before cost model v2 (commit 82cff47): per profile,
# the keep-all peak and the sum of the one saved size per layer, under the spec's
# version-1 reading. The v1 zoo already counted each saved tensor once (in the
# first layer that saved it), so it held the same activations; what changed is the
# gradients: v1 put an operator's incoming and outgoing gradients in its backward
# scratch, v2 holds g_i and g_{i+1} for the whole backward of a layer.
OLD_V1 = {
    "vgg16-b64-a100-pcie4-roofline": (4_959_351_936, 2_719_606_788),
    "resnet50-blocks-b128-a100-pcie4-roofline": (6_086_853_248, 5_563_158_020),
    "resnet50-ops-b128-a100-pcie4-roofline": (6_061_163_136, 5_563_158_020),
    "bert-base-b32-s512-h100-pcie5-roofline": (20_069_213_096, 13_315_735_556),
    "gpt-12blk-b8-s1024-h100-pcie5-roofline": (16_394_850_312, 10_286_628_868),
    "gpt-24blk-b8-s1024-h100-pcie5-roofline": (26_364_006_408, 18_894_913_540),
    "gpt-48blk-b8-s1024-h100-pcie5-roofline": (46_302_318_600, 36_111_482_884),
}


def test_keep_all_against_the_old_v1_reading(zoo):
    """Same activations as v1; the keep-all peak equals v1's on per-operator chains
    (an operator's gradients were its scratch: the same bytes at the same time) and
    is higher on grouped ones (v2 holds a group's boundary gradients beside its inner
    ones). ResNet-50 blocks: both peak in conv5_3's backward, where v1 held the
    add's three gradients (3 x 25,690,112) and v2 holds four (g_i, g_{i+1} and the
    add's two inner ones)."""
    assert set(OLD_V1) == set(zoo)
    for name, p in zoo.items():
        old_peak, old_saved = OLD_V1[name]
        assert backward_read_bytes(p.layers) == old_saved, name
        peak = planopt.simulate(p, planopt.Plan.keep_all(p)).peak_bytes
        if "-ops-" in name or name.startswith(("gpt", "bert")):
            assert peak == old_peak, name
        else:
            assert peak > old_peak, name
    blocks = zoo["resnet50-blocks-b128-a100-pcie4-roofline"]
    assert keep_all_peak(blocks) == OLD_V1[blocks.name][0] + 25_690_112


# -- files ----------------------------------------------------------------------


def test_profiles_load_validate_and_state_they_are_estimates(zoo):
    devices = set()
    for entry in ZOO:
        path = PROFILES_DIR / f"{entry.name}.json"
        assert json.loads(path.read_text())["format"] == "planopt.profile/2"
        loaded = planopt.load_profile(path)
        assert loaded == zoo[entry.name]
        assert not loaded.is_v1
        assert planopt.bundled_profile(entry.name) == loaded
        assert entry.name in planopt.bundled_profile_names()
        assert loaded.source.startswith("ESTIMATES, not measurements")
        assert entry.hardware.description in loaded.source
        assert "fp16 activations" in loaded.source
        assert "Memory (cost model v2)" in loaded.source
        batch = re.search(r"-b(\d+)-", entry.name).group(1)
        assert f"batch {batch}," in loaded.source
        devices.add(loaded.device.name)
        assert path.stat().st_size < 200_000
    assert devices == {"a100-pcie4", "h100-pcie5"}


@pytest.mark.parametrize(
    "name",
    ["alexnet-b128-caffe-titanx", "vgg16-b128-pipedream", "resnet50-blocks-b128-pipedream"],
)
def test_measured_profiles_stay_version_1(name):
    """Measured numbers from the literature: one saved size per layer, read as v1."""
    raw = json.loads((PROFILES_DIR / f"{name}.json").read_text())
    assert raw["format"] == "planopt.profile/1"
    assert all("out_bytes" not in layer and "saved_bytes" in layer for layer in raw["layers"])
    assert "Version-1 data" in raw["source"]
    profile = planopt.bundled_profile(name)
    assert profile.is_v1
    assert [x.out_bytes for x in profile.layers] == [x["saved_bytes"] for x in raw["layers"]]


def test_committed_files_equal_the_generator_output():
    for filename, text in rendered().items():
        committed = (PROFILES_DIR / filename).read_text()
        assert committed == text, f"{filename} is stale: run `python -m planopt.zoo.build`"


def test_build_is_deterministic(tmp_path: Path):
    assert main([str(tmp_path / "a")]) == 0
    assert main([str(tmp_path / "b")]) == 0
    for entry in ZOO:
        a = (tmp_path / "a" / f"{entry.name}.json").read_bytes()
        assert a == (tmp_path / "b" / f"{entry.name}.json").read_bytes()
    assert render(ZOO[0].profile()) == render(ZOO[0].profile())


# -- against PyTorch autograd ---------------------------------------------------


class _Recorder:
    """What each operator packs for backward (`saved_tensors_hooks`) and which
    operator made each storage (a dispatch mode sees every ATen call's outputs).

    Storages are known by address; every output is kept alive, so no address
    is reused within a run.
    """

    def __init__(self, torch):
        self.torch = torch
        self.exclude: set[int] = set()
        self.first: dict[int, tuple[str, object, int]] = {}
        self.packed: dict[str, set[int]] = {}
        self.made_by: dict[int, str] = {}
        self.results: dict[str, list[int]] = {}  # op -> first output of each ATen call
        self.size: dict[int, tuple[object, int]] = {}
        self.alive: list = []
        self.current = ""

    def const(self, t):
        self.exclude.add(t.untyped_storage().data_ptr())
        return t

    def param(self, *shape):
        return self.const(self.torch.zeros(*shape, requires_grad=True))

    @contextmanager
    def op(self, name: str):
        self.current = name
        yield

    def _note(self, t) -> int:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        self.size.setdefault(ptr, (t.dtype, storage.nbytes() // t.element_size()))
        return ptr

    def pack(self, t):
        ptr = self._note(t)
        if ptr not in self.exclude:
            self.first.setdefault(ptr, (self.current, *self.size[ptr]))
            self.packed.setdefault(self.current, set()).add(ptr)
        return t

    def made(self, out) -> None:
        outs = out if isinstance(out, tuple | list) else (out,)
        tensors = [t for t in outs if isinstance(t, self.torch.Tensor)]
        for t in tensors:
            self.alive.append(t)
            self.made_by.setdefault(self._note(t), self.current)
        if tensors and isinstance(outs[0], self.torch.Tensor):
            self.results.setdefault(self.current, []).append(self._note(outs[0]))

    def result(self, op: str) -> int:
        """The storage of an operator's result: its last ATen call's first output
        (parameters and constants made inside it excluded)."""
        return [ptr for ptr in self.results[op] if ptr not in self.exclude][-1]

    def hooks(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        rec = self

        class Outputs(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                rec.made(out)
                return out

        stack = ExitStack()
        stack.enter_context(self.torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t))
        stack.enter_context(Outputs())
        return stack

    def kind(self, ptr: int) -> str:
        return {self.torch.bool: "bool", self.torch.int64: "int64"}.get(self.size[ptr][0], "float")

    def per_op(self) -> dict[str, Counter]:
        out: dict[str, Counter] = {}
        for ptr, (op, _, numel) in self.first.items():
            out.setdefault(op, Counter())[self.kind(ptr)] += numel
        return out


def _kind(t: Tensor) -> str:
    # the torch runs are fp32 on CPU: compare element counts, fp16/fp32 both "float"
    return {1: "bool", 8: "int64"}.get(t.itemsize, "float")


def _first_savers(net: Network) -> list[Counter]:
    """Per layer, the distinct non-static tensors it is the first in forward order to save."""
    seen: set[str] = set()
    result = []
    for group in net.groups:
        mine = Counter()
        for op in group.ops:
            for t in op.saves:
                if not t.static and t.key not in seen:
                    seen.add(t.key)
                    mine[_kind(t)] += t.numel
        result.append(mine)
    return result


def _assert_same_saved(net: Network, rec: _Recorder) -> None:
    """Each operator's saving rule: the tensors each layer is the first to save."""
    group_of = {op.name: g.name for g in net.groups for op in g.ops}
    got: dict[str, Counter] = {}
    for op, counts in rec.per_op().items():
        got.setdefault(group_of[op], Counter()).update(counts)
    for group, want in zip(net.groups, _first_savers(net), strict=True):
        assert dict(+want) == dict(got.get(group.name, Counter())), group.name


def _assert_same_v2(net: Network, rec: _Recorder) -> None:
    """The chain's v2 reading against torch's storages, layer by layer.

    Torch's layer output is the result of the group's last operator, its input
    the previous layer's; `saves_input`/`saves_output`: some operator of the
    group packs that storage (an in-place result is its input's storage: it
    counts as the output, as in the chain); internals: the packed storages
    made inside the group that are neither. Layer 0's input is the batch, a
    constant torch does not report.
    """
    chain = products(net.groups)
    index = {op.name: i for i, g in enumerate(net.groups) for op in g.ops}
    results = [rec.result(g.ops[-1].name) for g in net.groups]
    for i, (group, p) in enumerate(zip(net.groups, chain, strict=True)):
        packed = set().union(*(rec.packed.get(op.name, set()) for op in group.ops))
        below = results[i - 1] if i > 0 else None
        saves_output = results[i] in packed
        saves_input = below is not None and below != results[i] and below in packed
        internals = Counter()
        for ptr in packed - {results[i], below}:
            if index.get(rec.made_by.get(ptr, "")) == i:
                internals[rec.kind(ptr)] += rec.size[ptr][1]
        want = Counter()
        for t in p.internals:
            want[_kind(t)] += t.numel
        got = (saves_input or (i == 0 and p.saves_input), saves_output, dict(+internals))
        assert got == (p.saves_input, p.saves_output, dict(+want)), group.name


def _torch_gpt(rec, torch, b, s, d, h, v, blocks):
    f = torch.nn.functional
    dh = d // h
    ids, labels = (rec.const(torch.randint(v, (b, s))) for _ in range(2))
    pos = rec.const(torch.arange(s))
    causal = rec.const(torch.tril(torch.ones(s, s, dtype=torch.bool)).view(1, 1, s, s))
    fill = rec.const(torch.tensor(-1e4))
    wte, wpe = rec.param(v, d), rec.param(s, d)

    def heads(t):
        return t.view(b, s, h, dh).permute(0, 2, 1, 3)

    def drop(t):
        # CUDA's fused dropout (`native_dropout`, bool mask); CPU F.dropout saves a float mask
        return torch.native_dropout(t, 0.1, True)[0]

    with rec.hooks():
        with rec.op("embed"):
            x = f.embedding(ids, wte) + f.embedding(pos, wpe)
        with rec.op("embed.dropout"):
            x = drop(x)
        for i in range(blocks):
            p = f"block{i}"
            with rec.op(f"{p}.ln1"):
                a = f.layer_norm(x, (d,), rec.param(d), rec.param(d))
            with rec.op(f"{p}.qkv"):
                qkv = f.linear(a, rec.param(3 * d, d), rec.param(3 * d))
            with rec.op(f"{p}.scores"):
                q, k, val = qkv.split(d, 2)
                w = torch.matmul(heads(q), heads(k).transpose(-1, -2)) / math.sqrt(dh)
                w = torch.where(causal, w, fill)
            with rec.op(f"{p}.softmax"):
                w = f.softmax(w, -1)
            with rec.op(f"{p}.attn_dropout"):
                w = drop(w)
            with rec.op(f"{p}.context"):
                c = torch.matmul(w, heads(val)).permute(0, 2, 1, 3).contiguous().view(b, s, d)
            with rec.op(f"{p}.attn_out"):
                o = f.linear(c, rec.param(d, d), rec.param(d))
            with rec.op(f"{p}.attn_residual"):
                r = drop(o) + x
            with rec.op(f"{p}.ln2"):
                a = f.layer_norm(r, (d,), rec.param(d), rec.param(d))
            with rec.op(f"{p}.mlp_up"):
                u = f.linear(a, rec.param(4 * d, d), rec.param(4 * d))
            with rec.op(f"{p}.gelu"):
                g = f.gelu(u, approximate="tanh")
            with rec.op(f"{p}.mlp_down"):
                o = f.linear(g, rec.param(d, 4 * d), rec.param(d))
            with rec.op(f"{p}.mlp_residual"):
                x = drop(o) + r
        with rec.op("ln_f"):
            a = f.layer_norm(x, (d,), rec.param(d), rec.param(d))
        with rec.op("lm_head"):
            logits = f.linear(a, wte)
        with rec.op("loss"):
            f.cross_entropy(logits.view(-1, v), labels.view(-1))


def _torch_bert(rec, torch, b, s, d, h, v, blocks, positions):
    f = torch.nn.functional
    dh = d // h
    ids, labels = (rec.const(torch.randint(v, (b, s))) for _ in range(2))
    types = rec.const(torch.zeros(b, s, dtype=torch.long))
    pos = rec.const(torch.arange(s))
    additive_mask = rec.const(torch.zeros(b, 1, 1, s))
    word, position, token_type = rec.param(v, d), rec.param(positions, d), rec.param(2, d)

    def heads(t):
        return t.view(b, s, h, dh).permute(0, 2, 1, 3)

    def drop(t):
        return torch.native_dropout(t, 0.1, True)[0]

    def ln(t):
        return f.layer_norm(t, (d,), rec.param(d), rec.param(d))

    with rec.hooks():
        with rec.op("embed"):
            x = f.embedding(ids, word) + f.embedding(types, token_type) + f.embedding(pos, position)
        with rec.op("embed.ln"):
            x = ln(x)
        with rec.op("embed.dropout"):
            x = drop(x)
        for i in range(blocks):
            p = f"block{i}"
            with rec.op(f"{p}.qkv"):
                q, k, val = (f.linear(x, rec.param(d, d), rec.param(d)) for _ in range(3))
            with rec.op(f"{p}.scores"):
                w = torch.matmul(heads(q), heads(k).transpose(-1, -2)) / math.sqrt(dh)
                w = w + additive_mask
            with rec.op(f"{p}.softmax"):
                w = f.softmax(w, -1)
            with rec.op(f"{p}.attn_dropout"):
                w = drop(w)
            with rec.op(f"{p}.context"):
                c = torch.matmul(w, heads(val)).permute(0, 2, 1, 3).contiguous().view(b, s, d)
            with rec.op(f"{p}.attn_out"):
                o = f.linear(c, rec.param(d, d), rec.param(d))
            with rec.op(f"{p}.attn_residual"):
                r = drop(o) + x
            with rec.op(f"{p}.ln1"):
                a = ln(r)
            with rec.op(f"{p}.ffn_up"):
                u = f.linear(a, rec.param(4 * d, d), rec.param(4 * d))
            with rec.op(f"{p}.gelu"):
                g = f.gelu(u)
            with rec.op(f"{p}.ffn_down"):
                o = f.linear(g, rec.param(d, 4 * d), rec.param(d))
            with rec.op(f"{p}.ffn_residual"):
                r = drop(o) + a
            with rec.op(f"{p}.ln2"):
                x = ln(r)
        with rec.op("mlm.dense"):
            x = f.linear(x, rec.param(d, d), rec.param(d))
        with rec.op("mlm.gelu"):
            x = f.gelu(x)
        with rec.op("mlm.ln"):
            x = ln(x)
        with rec.op("mlm.decoder"):
            x = f.linear(x, word, rec.param(v))
        with rec.op("loss"):
            f.cross_entropy(x.view(-1, v), labels.view(-1))


_VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")
_RESNET50 = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))


def _torch_vgg(rec, torch, b, image):
    f = torch.nn.functional
    x = rec.const(torch.randn(b, 3, image, image))
    labels = rec.const(torch.randint(1000, (b,)))
    cin, stage, index = 3, 1, 1
    with rec.hooks():
        for item in _VGG16:
            if item == "M":
                with rec.op(f"pool{stage}"):
                    x = f.max_pool2d(x, 2, 2)
                stage, index = stage + 1, 1
                continue
            name = f"conv{stage}_{index}"
            with rec.op(name):
                x = f.conv2d(x, rec.param(item, cin, 3, 3), rec.param(item), padding=1)
            with rec.op(f"{name}.relu"):
                x = f.relu(x, inplace=True)
            cin, index = item, index + 1
        with rec.op("avgpool"):
            x = f.adaptive_avg_pool2d(x, 7).flatten(1)
        for name in ("fc6", "fc7"):
            with rec.op(name):
                x = f.linear(x, rec.param(4096, x.shape[1]), rec.param(4096))
            with rec.op(f"{name}.relu"):
                x = f.relu(x, inplace=True)
            with rec.op(f"{name}.dropout"):
                x = torch.native_dropout(x, 0.5, True)[0]
        with rec.op("fc8"):
            x = f.linear(x, rec.param(1000, 4096), rec.param(1000))
        with rec.op("loss"):
            f.cross_entropy(x, labels)


def _torch_resnet(rec, torch, b, image):
    f = torch.nn.functional

    def bn(name, t):
        c = t.shape[1]
        mean, var = rec.const(torch.zeros(c)), rec.const(torch.ones(c))
        with rec.op(name):
            return f.batch_norm(t, mean, var, rec.param(c), rec.param(c), training=True)

    def conv(name, t, cout, k, stride=1):
        with rec.op(name):
            return f.conv2d(t, rec.param(cout, t.shape[1], k, k), stride=stride, padding=k // 2)

    x = rec.const(torch.randn(b, 3, image, image))
    labels = rec.const(torch.randint(1000, (b,)))
    with rec.hooks():
        with rec.op("stem.conv"):
            x = f.conv2d(x, rec.param(64, 3, 7, 7), stride=2, padding=3)
        x = bn("stem.bn", x)
        with rec.op("stem.relu"):
            x = f.relu(x, inplace=True)
        with rec.op("stem.maxpool"):
            x = f.max_pool2d(x, 3, 2, 1)
        for stage, (width, blocks, stride) in enumerate(_RESNET50, start=2):
            for blk in range(blocks):
                s = stride if blk == 0 else 1
                p = f"conv{stage}_{blk + 1}"
                y = x
                for j, (k, ch, st) in enumerate(
                    ((1, width, 1), (3, width, s), (1, 4 * width, 1)), 1
                ):
                    y = bn(f"{p}.bn{j}", conv(f"{p}.conv{j}", y, ch, k, st))
                    if j < 3:
                        with rec.op(f"{p}.relu{j}"):
                            y = f.relu(y, inplace=True)
                identity = x
                if blk == 0:
                    identity = bn(
                        f"{p}.downsample.bn", conv(f"{p}.downsample.conv", x, 4 * width, 1, s)
                    )
                with rec.op(f"{p}.add"):
                    y = y + identity
                with rec.op(f"{p}.relu3"):
                    x = f.relu(y, inplace=True)
        with rec.op("avgpool"):
            x = f.adaptive_avg_pool2d(x, 1)
        with rec.op("fc"):
            x = f.linear(x.flatten(1), rec.param(1000, 2048), rec.param(1000))
        with rec.op("loss"):
            f.cross_entropy(x, labels)


def test_saved_tensors_match_pytorch_autograd_gpt_and_bert():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    rec = _Recorder(torch)
    _torch_gpt(rec, torch, 2, 16, 32, 4, 50, 2)
    net = gpt(2, 2, 16, d=32, heads=4, vocab=50)
    _assert_same_saved(net, rec)
    _assert_same_v2(net, rec)
    rec = _Recorder(torch)
    _torch_bert(rec, torch, 2, 16, 32, 4, 50, 2, 20)
    net = bert_base(2, 16, blocks=2, d=32, heads=4, vocab=50, positions=20)
    _assert_same_saved(net, rec)
    _assert_same_v2(net, rec)


def test_saved_tensors_match_pytorch_autograd_cnns():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    rec = _Recorder(torch)
    _torch_resnet(rec, torch, 2, 64)
    for per_operator in (True, False):
        net = resnet50(2, per_operator=per_operator, image=64)
        _assert_same_saved(net, rec)
        _assert_same_v2(net, rec)
    rec = _Recorder(torch)
    _torch_vgg(rec, torch, 1, 32)
    _assert_same_saved(vgg16(1, image=32), rec)
    _assert_same_v2(vgg16(1, image=32), rec)


def test_the_recorder_can_fail():
    """Deliberately wrong rules are caught by the torch comparison: relu1 saving
    nothing (the saving rule), and a conv saving its output instead of its input
    (the v2 flags)."""
    torch = pytest.importorskip("torch")
    rec = _Recorder(torch)
    _torch_resnet(rec, torch, 2, 32)
    net = resnet50(2, per_operator=True, image=32)
    _assert_same_saved(net, rec)
    _assert_same_v2(net, rec)

    def broken(name: str, saves) -> Network:
        groups = tuple(
            replace(
                g,
                ops=tuple(replace(op, saves=saves(op)) if op.name == name else op for op in g.ops),
            )
            for g in net.groups
        )
        return replace(net, groups=groups)

    with pytest.raises(AssertionError, match="relu1"):
        _assert_same_saved(broken("conv2_2.relu1", lambda op: ()), rec)
    with pytest.raises(AssertionError, match=r"conv2_2\.conv2"):
        _assert_same_v2(broken("conv2_2.conv2", lambda op: op.outputs), rec)


def test_activation_dtype_is_fp16():
    assert FP16 == 2
    x = Tensor("x", (4, 8))
    assert ops.linear("l", x, 16).out.itemsize == 2
