"""The roofline model that turns an operator's FLOPs and bytes into seconds.

The bundled zoo profiles are ESTIMATES, not measurements: every time in them
comes from `Hardware.seconds`, stated here once so a reader can redo it.

    time = max(flops / (peak * compute_efficiency),
               bytes / (hbm_bandwidth * memory_efficiency))
           + kernels * launch_overhead

`peak` is the fp16 tensor-core rate for matmul/conv ("tensor" ops) and the
fp32 CUDA-core rate for everything else ("vector" ops: normalisations,
activations, softmax, dropout, adds), which are memory-bound in practice.

NOTE (precision): mixed precision as in NVIDIA apex O2 / `model.half()` with
fp32 master weights: activations and gradients are fp16 (2 bytes), the small
normalisation statistics (mean, rstd, invstd) fp32, dropout masks bool (1
byte), max-pool indices int64 and the loss (log-softmax) fp32, as autocast
runs it.

NOTE (sources of the device numbers):
- A100 40GB PCIe: NVIDIA A100 datasheet (2020): fp16 tensor 312 TFLOP/s dense,
  fp32 19.5 TFLOP/s, HBM2 1,555 GB/s. PCIe Gen4 x16 is 31.5 GB/s raw per
  direction; ~25 GB/s is what pinned-memory copies typically sustain.
- H100 PCIe 80GB: NVIDIA H100 datasheet (2022): fp16 tensor 1,513 TFLOP/s with
  sparsity, so 756 dense; fp32 51 TFLOP/s; HBM2e 2.0 TB/s. PCIe Gen5 x16 is
  63 GB/s raw per direction; ~50 GB/s sustained.
- Efficiency factors (ours, stated): large GEMMs/convs sustain ~60% of the
  tensor peak and streaming kernels ~80% of HBM bandwidth; 5 us per kernel
  launch; 10 us per host copy (`transfer_latency`).
"""

from __future__ import annotations

from dataclasses import dataclass

from planopt.profile import Device

TFLOP = 1e12
GB = 1e9
GIB = 2**30


@dataclass(frozen=True, slots=True)
class Hardware:
    """A device preset: peak rates, the sustained fraction of them, and its host link."""

    name: str
    description: str
    tensor_flops: float  # fp16 tensor-core peak, dense (FLOP/s)
    vector_flops: float  # fp32 CUDA-core peak (FLOP/s)
    hbm_bandwidth: float  # bytes/s
    link_bandwidth: float  # sustained host link, each direction (bytes/s)
    memory_bytes: int  # device memory, for the sources' "fraction of memory" remark
    compute_efficiency: float = 0.6
    memory_efficiency: float = 0.8
    launch_overhead: float = 5e-6  # seconds per kernel
    transfer_latency: float = 10e-6  # seconds per host copy

    def seconds(self, flops: float, nbytes: float, *, tensor: bool, kernels: int = 1) -> float:
        """Roofline time of `kernels` kernels doing `flops` and moving `nbytes` in all."""
        peak = self.tensor_flops if tensor else self.vector_flops
        compute = flops / (peak * self.compute_efficiency)
        memory = nbytes / (self.hbm_bandwidth * self.memory_efficiency)
        return max(compute, memory) + kernels * self.launch_overhead

    def device(self) -> Device:
        """The spec's `Device`: only the host link matters to the cost model."""
        return Device(
            name=self.name,
            h2d_bandwidth=self.link_bandwidth,
            d2h_bandwidth=self.link_bandwidth,
            transfer_latency=self.transfer_latency,
        )

    def summary(self) -> str:
        """One line for a profile's `source`: the numbers that made its times."""
        return (
            f"{self.description}: fp16 tensor {self.tensor_flops / TFLOP:g} TFLOP/s, "
            f"fp32 {self.vector_flops / TFLOP:g} TFLOP/s, HBM {self.hbm_bandwidth / GB:g} GB/s, "
            f"host link {self.link_bandwidth / GB:g} GB/s each way; sustained "
            f"{self.compute_efficiency:g} of compute peak and {self.memory_efficiency:g} of "
            f"HBM bandwidth, {self.launch_overhead * 1e6:g} us per kernel, "
            f"{self.transfer_latency * 1e6:g} us per copy"
        )


A100_PCIE4 = Hardware(
    name="a100-pcie4",
    description="NVIDIA A100 40GB PCIe on PCIe Gen4 x16",
    tensor_flops=312 * TFLOP,
    vector_flops=19.5 * TFLOP,
    hbm_bandwidth=1555 * GB,
    link_bandwidth=25 * GB,
    memory_bytes=40 * GIB,
)

H100_PCIE5 = Hardware(
    name="h100-pcie5",
    description="NVIDIA H100 80GB PCIe on PCIe Gen5 x16",
    tensor_flops=756 * TFLOP,
    vector_flops=51 * TFLOP,
    hbm_bandwidth=2000 * GB,
    link_bandwidth=50 * GB,
    memory_bytes=80 * GIB,
)

PRESETS: dict[str, Hardware] = {hw.name: hw for hw in (A100_PCIE4, H100_PCIE5)}
