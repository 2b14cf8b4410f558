"""The vocabulary the zoo's networks are written in: tensors, kernels, operators.

An `Op` is one PyTorch autograd operator (or a short fixed sequence of them
that PyTorch runs as one module call). It states which tensors it reads and
writes, which it saves for backward (the rule is in each constructor in
`planopt.zoo.ops`), and its forward and backward kernels as FLOPs and bytes
for the roofline model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FP16 = 2
FP32 = 4
INT64 = 8
BOOL = 1


@dataclass(frozen=True, slots=True)
class Tensor:
    """A tensor by identity (`key`), shape and element size.

    `static` tensors (the input batch) live in `static_bytes`, never in a
    layer's saved bytes or scratch, and need no gradient.
    """

    key: str
    shape: tuple[int, ...]
    itemsize: int = FP16
    static: bool = False

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def dims(self) -> str:
        """Shape as text for signatures: '8x1024x768'."""
        return "x".join(str(d) for d in self.shape)


@dataclass(frozen=True, slots=True)
class Kernel:
    """One GPU kernel: its arithmetic, its memory traffic, and which peak it runs at."""

    flops: float
    nbytes: float
    tensor: bool = False  # True: fp16 tensor cores (matmul/conv); False: CUDA cores


def gemm(m: int, n: int, k: int, itemsize: int = FP16) -> Kernel:
    """An (m x k) @ (k x n) product: 2mnk FLOPs, reading both operands, writing the result."""
    return Kernel(2.0 * m * n * k, float(itemsize * (m * k + k * n + m * n)), tensor=True)


def stream(nbytes: float, flops: float = 0.0) -> Kernel:
    """A memory-bound elementwise or reduction kernel that moves `nbytes`."""
    return Kernel(float(flops), float(nbytes), tensor=False)


@dataclass(frozen=True, slots=True)
class Op:
    """One operator of the network, with everything the profile needs from it.

    `scratch` holds forward temporaries that die inside the op (e.g. the
    unscaled attention scores); `bwd_scratch_bytes` the backward temporaries
    beyond the incoming and outgoing gradients. `params` are trainable
    parameters (each costs optimizer state in `static_bytes`), `buffer_bytes`
    non-trained state such as batch-norm running statistics.
    """

    name: str
    signature: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    saves: tuple[Tensor, ...]
    fwd: tuple[Kernel, ...]
    bwd: tuple[Kernel, ...]
    scratch: tuple[Tensor, ...] = ()
    bwd_scratch_bytes: int = 0
    params: int = 0
    buffer_bytes: int = 0

    @property
    def out(self) -> Tensor:
        """The (first) output, for chaining constructors."""
        return self.outputs[0]

    @property
    def fwd_flops(self) -> float:
        return math.fsum(k.flops for k in self.fwd)

    @property
    def bwd_flops(self) -> float:
        return math.fsum(k.flops for k in self.bwd)

    def grad_bytes(self, *, skip_output: str | None = None, skip_input: str | None = None) -> int:
        """Gradients its backward holds: of its outputs (incoming) and of its inputs (outgoing).

        Same dtype as the tensors; static inputs (the batch) get no gradient.
        `skip_output`/`skip_input` name a tensor (by key) whose gradient the
        chain models itself (`input_grad_bytes` of a layer), so it is left out.
        An in-place op's input and output share a key but not a gradient:
        they are skipped separately.
        """
        total = 0
        seen: set[str] = set()
        for t in self.outputs:
            if t.key != skip_output and t.key not in seen:
                seen.add(t.key)
                total += t.nbytes
        seen.clear()
        for t in self.inputs:
            if not t.static and t.key != skip_input and t.key not in seen:
                seen.add(t.key)
                total += t.nbytes
        return total
