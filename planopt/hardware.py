"""Named accelerators: datasheet peaks, memory bandwidth, host link, and the roofline.

One record per accelerator (`GPU`), used by every estimate planopt makes
without running on the device: the roofline zoo's bundled profiles and
profiles traced from PyTorch without a GPU. A time is

    max(flops / (peak[dtype] * compute_efficiency),
        bytes / (memory_bandwidth * memory_efficiency))
    + kernels * launch_overhead

`peak[dtype]` is the dense tensor-core rate for matmul-like kernels in that
dtype (`fp16`, `bf16`, `tf32`); any other kernel (normalisations,
activations, softmax, dropout, adds: memory-bound in practice) uses the
fp32 CUDA-core rate `vector_flops`. Every time planopt derives this way is
an ESTIMATE, and profiles say so in `source`.

NOTE (sources; dense rates, no sparsity, boost clocks):
- H100 SXM5 80GB and H100 PCIe 80GB: NVIDIA H100 Tensor Core GPU datasheet
  (2022-2023). SXM: fp16/bf16 989.4, tf32 494.7, fp32 67 TFLOP/s, HBM3
  3.35 TB/s. PCIe: fp16/bf16 756, tf32 378, fp32 51 TFLOP/s, HBM2e 2.0 TB/s.
  Host link PCIe Gen5 x16: 64 GB/s raw each way, ~50 GB/s sustained by
  pinned copies.
- H200 SXM 141GB: NVIDIA H200 Tensor Core GPU datasheet (2024): the H100
  SXM's compute (fp16/bf16 989.4, tf32 494.7, fp32 67 TFLOP/s dense) with
  HBM3e at 4.8 TB/s; PCIe Gen5 x16 host link. torch names it "NVIDIA H200".
- A100 40GB PCIe, A100 80GB PCIe, A100 80GB SXM4: NVIDIA A100 datasheet
  (2020-2021): fp16/bf16 312, tf32 156, fp32 19.5 TFLOP/s; HBM2 1,555 GB/s
  (40GB PCIe), HBM2e 1,935 GB/s (80GB PCIe), 2,039 GB/s (80GB SXM4). Host
  link PCIe Gen4 x16: 32 GB/s raw each way, ~25 GB/s sustained.
- L4: NVIDIA L4 datasheet (2023): fp16/bf16 121, tf32 60, fp32 30.3
  TFLOP/s; GDDR6 300 GB/s, 24 GB; PCIe Gen4 x16.
- GeForce RTX 4090: NVIDIA Ada Lovelace architecture whitepaper (2022):
  fp16/bf16 tensor with fp32 accumulate 165.2 (330.3 with fp16
  accumulate, which autocast does not use), tf32 82.6, fp32 82.6 TFLOP/s;
  GDDR6X 1,008 GB/s, 24 GB; PCIe Gen4 x16.
- Efficiencies (ours, stated): large GEMMs and convolutions sustain ~60% of
  the tensor peak, streaming kernels ~80% of memory bandwidth; 5 us per
  kernel launch; 10 us per host copy (`transfer_latency`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from planopt.errors import PlanoptError
from planopt.profile import Device

TFLOP = 1e12
GB = 1e9
GIB = 2**30
TENSOR_DTYPES = ("fp16", "bf16", "tf32")


@dataclass(frozen=True)
class GPU:
    """An accelerator: its peaks, the sustained fraction of them, and its host link."""

    name: str
    description: str
    tensor_flops: Mapping[str, float]  # dtype -> dense tensor-core peak (FLOP/s)
    vector_flops: float  # fp32 CUDA-core peak (FLOP/s)
    memory_bandwidth: float  # bytes/s
    link_bandwidth: float  # sustained host link, each direction (bytes/s)
    memory_bytes: int
    compute_efficiency: float = 0.6
    memory_efficiency: float = 0.8
    launch_overhead: float = 5e-6  # seconds per kernel
    transfer_latency: float = 10e-6  # seconds per host copy
    aliases: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tensor_flops", MappingProxyType(dict(self.tensor_flops)))

    def peak(self, dtype: str | None) -> float:
        """The rate a kernel runs at: the tensor peak of `dtype`, or fp32 vector (None)."""
        if dtype is None:
            return self.vector_flops
        if dtype not in self.tensor_flops:
            choices = ", ".join(sorted(self.tensor_flops))
            raise PlanoptError(
                f"{self.name}: dtype must be one of {choices} or None, got {dtype!r}"
            )
        return self.tensor_flops[dtype]

    def seconds(
        self, flops: float, nbytes: float, *, dtype: str | None = None, kernels: int = 1
    ) -> float:
        """Roofline time of `kernels` kernels doing `flops` and moving `nbytes` in all."""
        compute = flops / (self.peak(dtype) * self.compute_efficiency)
        memory = nbytes / (self.memory_bandwidth * self.memory_efficiency)
        return max(compute, memory) + kernels * self.launch_overhead

    def device(self) -> Device:
        """The spec's `Device`: only the host link matters to the cost model."""
        return Device(
            name=self.name,
            h2d_bandwidth=self.link_bandwidth,
            d2h_bandwidth=self.link_bandwidth,
            transfer_latency=self.transfer_latency,
        )

    def summary(self, dtype: str = "fp16") -> str:
        """One line for a profile's `source`: the numbers that made its times."""
        return (
            f"{self.description}: {dtype} tensor {self.peak(dtype) / TFLOP:g} TFLOP/s, "
            f"fp32 {self.vector_flops / TFLOP:g} TFLOP/s, HBM {self.memory_bandwidth / GB:g} GB/s, "
            f"host link {self.link_bandwidth / GB:g} GB/s each way; sustained "
            f"{self.compute_efficiency:g} of compute peak and {self.memory_efficiency:g} of "
            f"HBM bandwidth, {self.launch_overhead * 1e6:g} us per kernel, "
            f"{self.transfer_latency * 1e6:g} us per copy"
        )


def _tensor(fp16: float, tf32: float, bf16: float | None = None) -> dict[str, float]:
    return {
        "fp16": fp16 * TFLOP,
        "bf16": (fp16 if bf16 is None else bf16) * TFLOP,
        "tf32": tf32 * TFLOP,
    }


H100_SXM = GPU(
    "h100-sxm",
    "NVIDIA H100 80GB SXM5 on PCIe Gen5 x16",
    _tensor(989.4, 494.7),
    67 * TFLOP,
    3350 * GB,
    50 * GB,
    80 * GIB,
)
H200_SXM = GPU(
    "h200-sxm",
    "NVIDIA H200 141GB SXM on PCIe Gen5 x16",
    _tensor(989.4, 494.7),
    67 * TFLOP,
    4800 * GB,
    50 * GB,
    141 * GIB,
    aliases=("h200",),
)
H100_PCIE5 = GPU(
    "h100-pcie5",
    "NVIDIA H100 80GB PCIe on PCIe Gen5 x16",
    _tensor(756, 378),
    51 * TFLOP,
    2000 * GB,
    50 * GB,
    80 * GIB,
    aliases=("h100-pcie",),
)
A100_PCIE4 = GPU(
    "a100-pcie4",
    "NVIDIA A100 40GB PCIe on PCIe Gen4 x16",
    _tensor(312, 156),
    19.5 * TFLOP,
    1555 * GB,
    25 * GB,
    40 * GIB,
    aliases=("a100-40gb",),
)
A100_80GB_PCIE = GPU(
    "a100-80gb-pcie",
    "NVIDIA A100 80GB PCIe on PCIe Gen4 x16",
    _tensor(312, 156),
    19.5 * TFLOP,
    1935 * GB,
    25 * GB,
    80 * GIB,
)
A100_80GB_SXM = GPU(
    "a100-80gb-sxm",
    "NVIDIA A100 80GB SXM4 on PCIe Gen4 x16",
    _tensor(312, 156),
    19.5 * TFLOP,
    2039 * GB,
    25 * GB,
    80 * GIB,
)
L4 = GPU(
    "l4",
    "NVIDIA L4 24GB on PCIe Gen4 x16",
    _tensor(121, 60),
    30.3 * TFLOP,
    300 * GB,
    25 * GB,
    24 * GIB,
)
RTX_4090 = GPU(
    "rtx-4090",
    "NVIDIA GeForce RTX 4090 24GB on PCIe Gen4 x16",
    _tensor(165.2, 82.6),
    82.6 * TFLOP,
    1008 * GB,
    25 * GB,
    24 * GIB,
)

GPUS: dict[str, GPU] = {
    gpu.name: gpu
    for gpu in (
        H100_SXM,
        H200_SXM,
        H100_PCIE5,
        A100_PCIE4,
        A100_80GB_PCIE,
        A100_80GB_SXM,
        L4,
        RTX_4090,
    )
}


def gpu(name: str) -> GPU:
    """The record named `name` (or an alias); unknown names list the valid ones."""
    for record in GPUS.values():
        if name == record.name or name in record.aliases:
            return record
    choices = ", ".join(sorted(n for g in GPUS.values() for n in (g.name, *g.aliases)))
    raise PlanoptError(f"gpu must be one of {choices}, got {name!r}")
