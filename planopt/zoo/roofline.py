"""The roofline model the zoo's bundled profiles are timed with (`planopt.hardware`).

The bundled zoo profiles are ESTIMATES, not measurements: every time in them
comes from `planopt.hardware.GPU.seconds`, stated there once (with the
source of every device number) so a reader can redo it. Matmul and
convolution kernels run at the fp16 tensor-core rate, everything else at the
fp32 CUDA-core rate.

NOTE (precision): mixed precision as in NVIDIA apex O2 / `model.half()` with
fp32 master weights: activations and gradients are fp16 (2 bytes), the small
normalisation statistics (mean, rstd, invstd) fp32, dropout masks bool (1
byte), max-pool indices int64 and the loss (log-softmax) fp32, as autocast
runs it.
"""

from __future__ import annotations

from planopt.hardware import A100_PCIE4, GPU, H100_PCIE5

# The accelerator records the zoo builds for (one catalogue: `planopt.hardware`).
Hardware = GPU
PRESETS: dict[str, GPU] = {hw.name: hw for hw in (A100_PCIE4, H100_PCIE5)}
ZOO_DTYPE = "fp16"

__all__ = ["A100_PCIE4", "H100_PCIE5", "PRESETS", "ZOO_DTYPE", "Hardware"]
