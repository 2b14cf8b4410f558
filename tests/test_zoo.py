"""The roofline zoo: hand-computed FLOPs and sizes, torch's own saved tensors, the files.

Independent truths used here: arithmetic written out in comments, parameter
counts published for torchvision/HF models, and PyTorch autograd itself
(`saved_tensors_hooks` on CPU records what each operator really saves).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

import planopt
from planopt.budget import keep_all_peak, min_budget
from planopt.zoo import A100_PCIE4, H100_PCIE5, bert_base, gpt, ops, resnet50, vgg16
from planopt.zoo.build import PROFILES_DIR, ZOO, main, render, rendered
from planopt.zoo.chain import Network, saved_tensors, static_bytes
from planopt.zoo.tensors import FP16, Tensor
from planopt.zoo.transformer import BLOCK_OPS


@pytest.fixture(scope="module")
def zoo() -> dict[str, planopt.Profile]:
    return {entry.name: entry.profile() for entry in ZOO}


def _layer(profile: planopt.Profile, name: str) -> planopt.Layer:
    (layer,) = [layer for layer in profile.layers if layer.name == name]
    return layer


# -- the roofline formula -------------------------------------------------------


def test_roofline_time_is_the_larger_bound_plus_launch():
    hw = A100_PCIE4
    # compute-bound: 1e12 FLOP / (312e12 * 0.6) = 5.341880e-3 s, + 5 us launch
    assert hw.seconds(1e12, 1e6, tensor=True) == pytest.approx(1e12 / 187.2e12 + 5e-6)
    # memory-bound: 1e9 B / (1555e9 * 0.8) = 8.038585e-4 s, + 5 us
    assert hw.seconds(1e6, 1e9, tensor=True) == pytest.approx(1e9 / 1244e9 + 5e-6)
    # vector ops run at the fp32 peak: 1e12 / (19.5e12 * 0.6) = 8.547e-2 s
    assert hw.seconds(1e12, 0, tensor=False) == pytest.approx(1e12 / 11.7e12 + 5e-6)
    assert hw.seconds(0, 0, tensor=False, kernels=3) == pytest.approx(15e-6)


def test_presets_state_their_sourced_numbers():
    assert (A100_PCIE4.tensor_flops, A100_PCIE4.hbm_bandwidth) == (312e12, 1555e9)
    assert (A100_PCIE4.vector_flops, A100_PCIE4.link_bandwidth) == (19.5e12, 25e9)
    assert (H100_PCIE5.tensor_flops, H100_PCIE5.hbm_bandwidth) == (756e12, 2000e9)
    assert H100_PCIE5.link_bandwidth == 50e9
    for hw in (A100_PCIE4, H100_PCIE5):
        dev = hw.device()
        assert dev.h2d_bandwidth == dev.d2h_bandwidth == hw.link_bandwidth
        assert dev.transfer_latency == 10e-6


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


# -- saved bytes by hand --------------------------------------------------------


def test_vgg_saved_bytes_by_hand(zoo):
    p = zoo["vgg16-b64-a100-pcie4-roofline"]
    # conv1_1+relu: its input is the (static) batch; the in-place ReLU output
    # 64 * 64 * 224 * 224 * 2 B = 411,041,792
    assert _layer(p, "conv1_1+relu").product_bytes == 411_041_792
    # pool1: input already counted by conv1_2; int64 indices 64*64*112*112*8 = 411,041,792
    assert _layer(p, "pool1").product_bytes == 411_041_792
    # conv2_1+relu: pool1's output (first saver) 64*64*112*112*2 = 102,760,448
    #             + its ReLU output 64*128*112*112*2 = 205,520,896
    assert _layer(p, "conv2_1+relu").product_bytes == 102_760_448 + 205_520_896
    # conv2_2+relu: input counted by conv2_1's ReLU; own output 205,520,896
    assert _layer(p, "conv2_2+relu").product_bytes == 205_520_896
    # avgpool (7x7 -> 7x7) saves its input, pool5's output: 64*512*7*7*2 = 3,211,264;
    # fc6 saves avgpool's output (3,211,264), its ReLU output 64*4096*2 = 524,288
    # and the dropout mask 64*4096 = 262,144
    assert _layer(p, "avgpool").product_bytes == 3_211_264
    assert _layer(p, "fc6+relu+dropout").product_bytes == 3_211_264 + 524_288 + 262_144


def test_gpt_block_saved_bytes_by_hand(zoo):
    p = zoo["gpt-12blk-b8-s1024-h100-pcie5-roofline"]
    act = 8 * 1024 * 768 * 2  # one fp16 (b, s, d) activation: 12,582,912 B
    score = 8 * 12 * 1024 * 1024  # elements of one (b, h, s, s) score tensor: 100,663,296
    stats = 2 * 8 * 1024 * 4  # mean + rstd, fp32 per row: 65,536 B
    expected = {
        "ln1": act + stats,  # its input (the block input) + stats
        "qkv": act,  # its input: ln1's output
        "scores": 2 * act,  # the q and k copies
        "softmax": 2 * score,  # its fp16 output
        "attn_dropout": score,  # bool mask
        "context": 2 * score + act,  # dropped probabilities + v copy
        "attn_out": act,  # merged context
        "attn_residual": act // 2,  # bool mask of (b, s, d)
        "ln2": act + stats,
        "mlp_up": act,
        "gelu": 4 * act,  # its input (b, s, 4d)
        "mlp_down": 4 * act,  # GELU's output
        "mlp_residual": act // 2,
    }
    for b in (0, 5, 11):
        for op, nbytes in expected.items():
            assert _layer(p, f"block{b}.{op}").product_bytes == nbytes, (b, op)
    # loss: fp32 log-probabilities 8*1024*50257*4 = 1,646,821,376 + 0-dim total_weight
    assert _layer(p, "loss").product_bytes == 1_646_821_376 + 4
    assert _layer(p, "embed").product_bytes == act // 2  # dropout mask; ids are static


def test_resnet_saved_bytes_by_hand(zoo):
    p = zoo["resnet50-ops-b128-a100-pcie4-roofline"]
    # bn1 of a stage-2 block: conv1 output 128*64*56*56*2 = 51,380,224 + mean, invstd 2*64*4
    assert _layer(p, "conv2_2.bn1").product_bytes == 51_380_224 + 512
    # conv1 of a non-first block: its input is relu3's output, counted there
    assert _layer(p, "conv2_2.conv1").product_bytes == 0
    # conv1 of the first block: saves the max-pool output (first saver) 51,380,224
    assert _layer(p, "conv2_1.conv1").product_bytes == 51_380_224
    # the residual add saves nothing; relu3 saves its (in-place) output 128*256*56*56*2
    assert _layer(p, "conv2_2.add").product_bytes == 0
    assert _layer(p, "conv2_2.relu3").product_bytes == 205_520_896
    # avgpool to 1x1 is a mean: nothing saved
    assert _layer(p, "avgpool").product_bytes == 0


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
        numbers = [
            (x.fwd, x.bwd, x.product_bytes, x.fwd_work_bytes, x.bwd_work_bytes) for x in block
        ]
        assert numbers == [
            (x.fwd, x.bwd, x.product_bytes, x.fwd_work_bytes, x.bwd_work_bytes)
            for x in body[:BLOCK_OPS]
        ]


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
            key = (
                layer.fwd,
                layer.bwd,
                layer.product_bytes,
                layer.fwd_work_bytes,
                layer.bwd_work_bytes,
            )
            assert seen.setdefault(layer.signature, key) == key, (name, layer.name)


def test_block_and_operator_variants_hold_the_same_work(zoo):
    blocks = zoo["resnet50-blocks-b128-a100-pcie4-roofline"]
    per_op = zoo["resnet50-ops-b128-a100-pcie4-roofline"]
    assert sum(x.product_bytes for x in blocks.layers) == sum(
        x.product_bytes for x in per_op.layers
    )
    assert blocks.static_bytes == per_op.static_bytes
    assert blocks.t_ideal == pytest.approx(per_op.t_ideal, rel=1e-5)  # 6-digit rounding
    # inside a block, tensors the block saves are no longer scratch: the largest is the
    # add's input from bn3, which nobody saves: 128*256*56*56*2 = 205,520,896
    assert _layer(blocks, "conv2_2").fwd_work_bytes == 205_520_896
    assert _layer(blocks, "conv2_2").fwd_work_bytes <= max(
        x.fwd_work_bytes for x in per_op.layers if x.name.startswith("conv2_2.")
    )


def test_scratch_counts_unsaved_tensors_and_gradients(zoo):
    p = zoo["gpt-12blk-b8-s1024-h100-pcie5-roofline"]
    score = 8 * 12 * 1024 * 1024 * 2
    # softmax reads the masked scores that nobody saves; its output is its saved tensor
    assert _layer(p, "block0.softmax").fwd_work_bytes == score
    # backward: incoming and outgoing score gradients
    assert _layer(p, "block0.softmax").bwd_work_bytes == 2 * score
    # a conv whose output the next batch norm saves holds that output as scratch
    r = zoo["resnet50-ops-b128-a100-pcie4-roofline"]
    assert _layer(r, "conv2_2.conv1").fwd_work_bytes == 128 * 64 * 56 * 56 * 2


def test_planning_matters_for_every_zoo_profile(zoo):
    for p in zoo.values():
        assert min_budget(p) < keep_all_peak(p)
        assert p.static_bytes < min_budget(p)


# -- files ----------------------------------------------------------------------


def test_profiles_load_validate_and_state_they_are_estimates(zoo):
    devices = set()
    for entry in ZOO:
        path = PROFILES_DIR / f"{entry.name}.json"
        loaded = planopt.load_profile(path)
        assert loaded == zoo[entry.name]
        assert planopt.bundled_profile(entry.name) == loaded
        assert entry.name in planopt.bundled_profile_names()
        assert loaded.source.startswith("ESTIMATES, not measurements")
        assert entry.hardware.description in loaded.source
        assert "fp16 activations" in loaded.source
        batch = re.search(r"-b(\d+)-", entry.name).group(1)
        assert f"batch {batch}," in loaded.source
        devices.add(loaded.device.name)
        assert path.stat().st_size < 200_000
    assert devices == {"a100-pcie4", "h100-pcie5"}


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
    """The first operator that packs each storage, via `saved_tensors_hooks`."""

    def __init__(self, torch):
        self.torch = torch
        self.exclude: set[int] = set()
        self.first: dict[int, tuple[str, object, int]] = {}
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

    def pack(self, t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in self.exclude and ptr not in self.first:
            self.first[ptr] = (self.current, t.dtype, storage.nbytes() // t.element_size())
        return t

    def hooks(self):
        return self.torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)

    def per_op(self) -> dict[str, Counter]:
        out: dict[str, Counter] = {}
        for op, dtype, numel in self.first.values():
            kind = {self.torch.bool: "bool", self.torch.int64: "int64"}.get(dtype, "float")
            out.setdefault(op, Counter())[kind] += numel
        return out


def _kind(t: Tensor) -> str:
    # the torch runs are fp32 on CPU: compare element counts, fp16/fp32 both "float"
    return {1: "bool", 8: "int64"}.get(t.itemsize, "float")


def _assert_same_saved(net: Network, rec: _Recorder) -> None:
    group_of = {op.name: g.name for g in net.groups for op in g.ops}
    got: dict[str, Counter] = {}
    for op, counts in rec.per_op().items():
        got.setdefault(group_of[op], Counter()).update(counts)
    for group, tensors in zip(net.groups, saved_tensors(net.groups), strict=True):
        want = Counter()
        for t in tensors:
            want[_kind(t)] += t.numel
        assert dict(+want) == dict(got.get(group.name, Counter())), group.name


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
    _assert_same_saved(gpt(2, 2, 16, d=32, heads=4, vocab=50), rec)
    rec = _Recorder(torch)
    _torch_bert(rec, torch, 2, 16, 32, 4, 50, 2, 20)
    _assert_same_saved(bert_base(2, 16, blocks=2, d=32, heads=4, vocab=50, positions=20), rec)


def test_saved_tensors_match_pytorch_autograd_cnns():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    rec = _Recorder(torch)
    _torch_resnet(rec, torch, 2, 64)
    _assert_same_saved(resnet50(2, per_operator=True, image=64), rec)
    _assert_same_saved(resnet50(2, per_operator=False, image=64), rec)
    rec = _Recorder(torch)
    _torch_vgg(rec, torch, 1, 32)
    _assert_same_saved(vgg16(1, image=32), rec)


def test_the_recorder_can_fail():
    """A deliberately wrong rule (relu not saving) is caught by the torch comparison."""
    torch = pytest.importorskip("torch")
    rec = _Recorder(torch)
    _torch_resnet(rec, torch, 2, 32)
    net = resnet50(2, per_operator=True, image=32)
    _assert_same_saved(net, rec)
    wrong = tuple(
        replace(
            g, ops=tuple(replace(op, saves=()) if op.name.endswith("relu1") else op for op in g.ops)
        )
        for g in net.groups
    )
    with pytest.raises(AssertionError):
        _assert_same_saved(replace(net, groups=wrong), rec)


def test_activation_dtype_is_fp16():
    assert FP16 == 2
    x = Tensor("x", (4, 8))
    assert ops.linear("l", x, 16).out.itemsize == 2
