"""Per-operator roofline time of a traced step, on a named GPU (`planopt.hardware`).

`RooflineMode` is a `TorchDispatchMode`: every ATen operator that launches a
kernel is costed as `GPU.seconds(flops, bytes, dtype=...)` (the roofline
plus one launch) and added to the step operation the step is in (`F_3`,
`B_5`: the label `planopt.runtime.tracker.at` sets), so a layer's time is
the sum of its kernels'. FLOPs come from the formulas of
`torch.utils.flop_counter` (what `FlopCounterMode` counts: matmuls,
convolutions, attention); bytes are what the operator reads and writes
(every tensor argument and result, at its own size). Operators with no
FLOP formula (normalisations, activations, copies, reductions) are costed
by their bytes, on the fp32 vector rate.

NOTE (rates by dtype, PyTorch's defaults on CUDA): fp16/bf16 matmuls and
convolutions run on the tensor cores at that dtype's peak; fp32
convolutions use TF32 (`torch.backends.cudnn.allow_tf32` is True by
default), fp32 matmuls do not (`torch.backends.cuda.matmul.allow_tf32` is
False by default) and run at the fp32 vector rate.

Views, allocations without a fill (`empty`), `detach` and `prim` operators
(metadata such as `prim.device`, which fake tensors dispatch whenever a
tensor's device is read: 150 of them per forward of a small transformer
block) launch no kernel and cost nothing.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from planopt.hardware import GPU

aten = torch.ops.aten

_NO_KERNEL = {
    aten.detach,
    aten.empty,
    aten.empty_like,
    aten.empty_strided,
    aten.new_empty,
    aten.new_empty_strided,
    aten.lift_fresh,
    aten.alias,
    aten._unsafe_view,
    aten.set_,
    aten.resize_,
    aten._local_scalar_dense,
}
_CONV = {
    aten.convolution,
    aten._convolution,
    aten.convolution_backward,
    aten.cudnn_convolution,
}
_TENSOR_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def kernel_dtype(packet, args) -> str | None:
    """The rate a matmul-like kernel runs at (module NOTE); None: fp32 vector."""
    first = next((a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor)), None)
    if first is None:
        return None
    if first.dtype in _TENSOR_DTYPES:
        return _TENSOR_DTYPES[first.dtype]
    if first.dtype == torch.float32 and packet in _CONV:
        return "tf32"
    return None


class RooflineMode(TorchDispatchMode):
    """Seconds, FLOPs, bytes and kernels per step operation on `gpu` (module doc).

    `label()` says which operation an operator belongs to (the tracker's
    `where`).
    """

    def __init__(self, gpu: GPU, label) -> None:
        super().__init__()
        self.gpu = gpu
        self.label = label
        self.seconds: dict[str, float] = defaultdict(float)
        self.flops: dict[str, float] = defaultdict(float)
        self.bytes: dict[str, int] = defaultdict(int)
        self.kernels: dict[str, int] = defaultdict(int)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        cost = op_cost(self.gpu, func, args, kwargs, out)
        if cost is None:
            return out
        seconds, flops, nbytes = cost
        where = self.label()
        self.seconds[where] += seconds
        self.flops[where] += flops
        self.bytes[where] += nbytes
        self.kernels[where] += 1
        return out


def op_cost(gpu: GPU, func, args, kwargs, out) -> tuple[float, float, int] | None:
    """`(seconds, flops, bytes)` of one operator's kernel on `gpu`; None: no kernel."""
    packet = func.overloadpacket
    if func.is_view or packet in _NO_KERNEL or func.namespace == "prim":
        return None
    flops = 0
    formula = flop_registry.get(packet)
    if formula is not None:
        flops = formula(*args, **kwargs, out_val=out)
    dtype = kernel_dtype(packet, args) if flops else None
    nbytes = _nbytes(tree_flatten((args, kwargs))[0]) + _nbytes(tree_flatten(out)[0])
    return gpu.seconds(flops, nbytes, dtype=dtype), flops, nbytes
