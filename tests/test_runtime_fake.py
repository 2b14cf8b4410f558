"""Profiles traced with fake tensors: the real profiler's memory, a stated roofline's time.

The memory fields are checked against the real profiler run on the same
model and batch on CPU (`memory_as="cpu"`), byte for byte; FLOPs against
torch's own `FlopCounterMode`; the time of a traced matmul and convolution
against the roofline formula worked by hand from the datasheet numbers;
attention's saved tensors on a GPU against the flash kernel's outputs.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import planopt  # noqa: E402
from planopt.hardware import A100_PCIE4, H100_PCIE5  # noqa: E402
from planopt.runtime import Chain, reference_model  # noqa: E402
from planopt.runtime.fake import trace_profile  # noqa: E402
from planopt.runtime.hf import hf_available, hf_model  # noqa: E402
from planopt.runtime.profiler import profile  # noqa: E402
from planopt.runtime.roofline import RooflineMode  # noqa: E402
from planopt.runtime.vision import VGG16, ResNet50, resnet50_chain, vgg16_chain  # noqa: E402

LINK = planopt.Device("pcie-given", 2.5e10, 2.0e10, 1e-5)
FIELDS = (
    "name",
    "out_bytes",
    "saved_bytes",
    "saves_input",
    "saves_output",
    "input_grad_bytes",
    "param_grad_bytes",
    "fwd_work_bytes",
    "bwd_work_bytes",
    "signature",
)


def _memory(prof: planopt.Profile) -> list[tuple]:
    return [tuple(getattr(layer, f) for f in FIELDS) for layer in prof.layers]


def _same_as_real(chain, batch, loss_fn, **kw) -> planopt.Profile:
    real = profile(chain, batch, loss_fn, link=LINK, iterations=1, warmup=0, **kw)
    fake = trace_profile(chain, batch, loss_fn, gpu="h100-pcie", memory_as="cpu", **kw)
    assert _memory(fake) == _memory(real)
    assert fake.static_bytes == real.static_bytes
    return fake


@pytest.mark.parametrize("name", ["mlp", "vgg", "resnet", "gpt"])
@pytest.mark.parametrize("autocast", [None, torch.bfloat16])
def test_fake_trace_counts_what_the_real_profiler_measures(name, autocast):
    ref = reference_model(name, "tiny")
    fake = _same_as_real(ref.chain, ref.batch(), ref.loss_fn, autocast=autocast)
    assert any(layer.saved_bytes for layer in fake.layers)
    # The chain is left as it was: real parameters, no gradients added.
    assert all(type(p) is nn.Parameter and p.grad is None for p in ref.chain.parameters())


def test_fake_trace_matches_with_gradients_set_to_none():
    ref = reference_model("gpt", "tiny")
    fake = _same_as_real(ref.chain, ref.batch(), ref.loss_fn, grads_to_none=True)
    assert any(layer.param_grad_bytes for layer in fake.layers)


@pytest.mark.skipif(not hf_available(), reason="needs transformers (the models extra)")
@pytest.mark.parametrize("name", ["gpt2", "llama"])
@pytest.mark.parametrize("autocast", [None, torch.float16])
def test_fake_trace_matches_the_real_profiler_on_transformers(name, autocast):
    ref = hf_model(name, "tiny")
    _same_as_real(ref.chain, ref.batch(), ref.loss_fn, autocast=autocast)


def test_fake_trace_matches_on_the_torchvision_architectures():
    # Small images keep the real CPU run short; the layers are the real ones.
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 32, 32, generator=gen)
    y = torch.randint(1000, (2,), generator=gen)
    loss = nn.functional.cross_entropy
    _same_as_real(resnet50_chain(ResNet50()), (x, y), loss, autocast=torch.bfloat16)
    _same_as_real(vgg16_chain(VGG16()), (x, y), loss)


def _torchvision():
    try:
        import torchvision.models as models
    except Exception as exc:  # the CUDA wheel fails at import on a CPU-only torch
        pytest.skip(f"torchvision does not import here: {type(exc).__name__}: {exc}")
    return models


@pytest.mark.parametrize("name", ["resnet50", "vgg16"])
def test_the_architectures_are_torchvisions(name):
    models = _torchvision()
    theirs = getattr(models, name)().eval()
    ours = (ResNet50() if name == "resnet50" else VGG16()).eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    chain = resnet50_chain(ours) if name == "resnet50" else vgg16_chain(ours)
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(chain(x), theirs(x))


def test_vision_chains_have_the_published_sizes():
    # torchvision documents 25,557,032 parameters for ResNet-50 and 138,357,544 for VGG-16.
    assert sum(p.numel() for p in ResNet50().parameters()) == 25_557_032
    assert sum(p.numel() for p in VGG16().parameters()) == 138_357_544
    assert len(resnet50_chain(ResNet50())) == 1 + 16 + 1
    assert len(vgg16_chain(VGG16())) == 13 + 5 + 3


def test_flops_are_those_flop_counter_mode_counts():
    ref = reference_model("gpt", "tiny")
    x, y = ref.batch()
    counter = FlopCounterMode(display=False)
    with counter:
        ref.chain.loss(x, y, ref.loss_fn).backward()
    roofline = RooflineMode(H100_PCIE5, lambda: "step")
    with roofline:
        ref.chain.loss(x, y, ref.loss_fn).backward()
    assert counter.get_total_flops() > 0
    assert roofline.flops["step"] == counter.get_total_flops()


def test_roofline_of_a_traced_matmul_is_the_hand_formula():
    # (512 x 1024) @ (1024 x 2048) in bf16 on an H100 PCIe: 2*m*k*n FLOP at the
    # bf16 tensor peak 756 TFLOP/s x 0.6; bytes read and written (m*k + k*n + m*n) * 2
    # at 2,000 GB/s x 0.8; plus a 5 us launch.
    m, k, n = 512, 1024, 2048
    a = torch.randn(m, k, dtype=torch.bfloat16)
    b = torch.randn(k, n, dtype=torch.bfloat16)
    roofline = RooflineMode(H100_PCIE5, lambda: "mm")
    with roofline:
        torch.mm(a, b)
    flops, nbytes = 2 * m * k * n, (m * k + k * n + m * n) * 2
    assert roofline.flops["mm"] == flops
    assert roofline.bytes["mm"] == nbytes
    want = max(flops / (756e12 * 0.6), nbytes / (2000e9 * 0.8)) + 5e-6
    assert roofline.seconds["mm"] == pytest.approx(want, rel=1e-12)


def test_roofline_of_a_traced_convolution_is_the_hand_formula():
    # A 3x3 convolution, 64 -> 128 channels on 8 x 64 x 56 x 56 fp32 images, on an
    # A100 40GB: 2 * (8*56*56) * 128 * (64*3*3) FLOP at TF32 (cuDNN's default for
    # fp32) 156 TFLOP/s x 0.6; bytes: input, weight, output in fp32 at 1,555 GB/s x 0.8.
    x = torch.randn(8, 64, 56, 56)
    w = torch.randn(128, 64, 3, 3)
    roofline = RooflineMode(A100_PCIE4, lambda: "conv")
    with roofline:
        F.conv2d(x, w, padding=1)
    flops = 2 * (8 * 56 * 56) * 128 * (64 * 9)
    nbytes = (8 * 64 * 56 * 56 + 128 * 64 * 9 + 8 * 128 * 56 * 56) * 4
    assert roofline.flops["conv"] == flops
    assert roofline.bytes["conv"] == nbytes
    want = max(flops / (156e12 * 0.6), nbytes / (1555e9 * 0.8)) + 5e-6
    assert roofline.seconds["conv"] == pytest.approx(want, rel=1e-12)


class _Attention(nn.Module):
    def forward(self, x):
        return F.scaled_dot_product_attention(x, x, x, dropout_p=0.1, is_causal=True)


class _Sum(nn.Module):
    def forward(self, x):
        return x.float().sum()


def test_attention_saves_what_the_gpus_flash_kernel_saves():
    b, h, s, d = 2, 4, 64, 32
    chain = Chain.from_modules(
        {"proj": nn.Linear(d, d, dtype=torch.bfloat16), "attn": _Attention(), "loss": _Sum()}
    )
    x = torch.randn(b, h, s, d, dtype=torch.bfloat16)
    gpu = trace_profile(chain, (x, torch.zeros(1)), None, gpu="a100-40gb")
    attn = gpu.layers[1]
    # Flash attention with dropout saves q = k = v (the input), its output, the
    # log-sum-exp (fp32, b x h x s) and the dropout RNG's seed and offset (one
    # 512-byte CUDA block each): no b x h x s x s matrix.
    assert attn.saves_input and attn.saves_output
    assert attn.out_bytes == b * h * s * d * 2
    assert attn.saved_bytes == math.ceil(b * h * s * 4 / 512) * 512 + 512 + 512
    # The CPU runs the math path with dropout on, and saves attention matrices.
    cpu = trace_profile(chain, (x, torch.zeros(1)), None, gpu="a100-40gb", memory_as="cpu")
    assert cpu.layers[1].saved_bytes >= b * h * s * s * 2
    assert "ESTIMATES" in gpu.source and "flash" in gpu.source


def test_gpu_sizes_are_rounded_to_the_allocators_blocks():
    ref = reference_model("mlp", "tiny")
    gpu = trace_profile(ref.chain, ref.batch(), ref.loss_fn, gpu="l4")
    for layer in gpu.layers:
        assert layer.out_bytes % 512 == 0 and layer.saved_bytes % 512 == 0
    assert gpu.device == planopt.hardware.gpu("l4").device()


def test_bad_arguments_are_named():
    ref = reference_model("mlp", "tiny")
    with pytest.raises(planopt.PlanoptError, match="gpu must be one of"):
        trace_profile(ref.chain, ref.batch(), ref.loss_fn, gpu="v100")
    with pytest.raises(planopt.PlanoptError, match="memory_as must be one of gpu, cpu"):
        trace_profile(ref.chain, ref.batch(), ref.loss_fn, gpu="l4", memory_as="tpu")
    with pytest.raises(ValueError, match="autocast must be"):
        trace_profile(ref.chain, ref.batch(), ref.loss_fn, gpu="l4", autocast=torch.float64)
