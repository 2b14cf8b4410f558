"""The accelerator catalogue and its roofline: hand formulas for a matmul and a convolution."""

from __future__ import annotations

import pytest

from planopt.errors import PlanoptError
from planopt.hardware import (
    A100_PCIE4,
    GPUS,
    H100_PCIE5,
    H100_SXM,
    H200_SXM,
    L4,
    RTX_4090,
    gpu,
)
from planopt.zoo import ops
from planopt.zoo.tensors import Tensor, gemm


def test_roofline_time_is_the_larger_bound_plus_launch():
    hw = A100_PCIE4
    # compute-bound: 1e12 FLOP / (312e12 * 0.6) = 5.341880e-3 s, + 5 us launch
    assert hw.seconds(1e12, 1e6, dtype="fp16") == pytest.approx(1e12 / 187.2e12 + 5e-6)
    # memory-bound: 1e9 B / (1555e9 * 0.8) = 8.038585e-4 s, + 5 us
    assert hw.seconds(1e6, 1e9, dtype="fp16") == pytest.approx(1e9 / 1244e9 + 5e-6)
    # other kernels run at the fp32 vector peak: 1e12 / (19.5e12 * 0.6) = 8.547e-2 s
    assert hw.seconds(1e12, 0) == pytest.approx(1e12 / 11.7e12 + 5e-6)
    assert hw.seconds(0, 0, kernels=3) == pytest.approx(15e-6)


def test_a_matmul_by_hand_on_an_h100_sxm():
    # (4096 x 4096) @ (4096 x 4096) in bf16: 2 * 4096^3 FLOP, 3 * 4096^2 * 2 bytes
    kernel = gemm(4096, 4096, 4096, 2)
    flops, nbytes = 2 * 4096**3, 3 * 4096**2 * 2
    assert (kernel.flops, kernel.nbytes) == (flops, nbytes)
    want = max(flops / (989.4e12 * 0.6), nbytes / (3350e9 * 0.8)) + 5e-6
    assert H100_SXM.seconds(kernel.flops, kernel.nbytes, dtype="bf16") == pytest.approx(want)
    assert flops / (989.4e12 * 0.6) > nbytes / (3350e9 * 0.8)  # compute-bound, as it should be


def test_a_convolution_by_hand_on_an_l4():
    # ResNet's 3x3 conv, 64 -> 64 channels on 56 x 56, batch 32, fp16 (as the zoo builds it)
    x = Tensor("x", (32, 64, 56, 56), 2)
    conv = ops.conv2d("conv", x, 64, 3, bias=False)
    (kernel,) = conv.fwd
    macs = 32 * 64 * 56 * 56 * 64 * 3 * 3
    assert kernel.flops == 2 * macs
    want = max(kernel.flops / (121e12 * 0.6), kernel.nbytes / (300e9 * 0.8)) + 5e-6
    assert L4.seconds(kernel.flops, kernel.nbytes, dtype="fp16") == pytest.approx(want)


def test_the_catalogue_states_datasheet_numbers():
    assert (A100_PCIE4.peak("fp16"), A100_PCIE4.memory_bandwidth) == (312e12, 1555e9)
    assert (A100_PCIE4.vector_flops, A100_PCIE4.link_bandwidth) == (19.5e12, 25e9)
    assert (H100_PCIE5.peak("bf16"), H100_PCIE5.memory_bandwidth) == (756e12, 2000e9)
    assert H100_SXM.peak("tf32") == 494.7e12 and RTX_4090.peak("fp16") == 165.2e12
    for record in GPUS.values():
        assert record.peak("bf16") == record.peak("fp16") >= record.peak("tf32")
        assert record.peak(None) == record.vector_flops
        dev = record.device()
        assert dev.h2d_bandwidth == dev.d2h_bandwidth == record.link_bandwidth
        assert record.description and record.memory_bytes > 0


def test_the_h200_is_the_h100_sxm_compute_with_hbm3e():
    # the device tool lends H200s: the GPU run (experiments/gpu_run.py) compares against it
    assert gpu("h200") is H200_SXM and H200_SXM.tensor_flops == H100_SXM.tensor_flops
    assert (H200_SXM.memory_bandwidth, H200_SXM.vector_flops) == (4800e9, 67e12)
    assert H200_SXM.memory_bytes == 141 * 2**30


def test_names_and_aliases_resolve_and_bad_input_is_named():
    assert gpu("h100-pcie") is H100_PCIE5 and gpu("a100-40gb") is A100_PCIE4
    with pytest.raises(PlanoptError, match=r"gpu must be one of .*h100-sxm.*got 'v100'"):
        gpu("v100")
    with pytest.raises(PlanoptError, match="dtype must be one of bf16, fp16, tf32"):
        L4.seconds(1.0, 1.0, dtype="fp8")
