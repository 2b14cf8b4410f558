"""What a recompute block must restore to give the forward's exact tensors again.

A recompute block reruns layers `k+1 .. t` in backward. For its saved
tensors to equal the forward's bit for bit it must see the same random
numbers (dropout), the same autocast state, and it must not leave side
effects twice (batch-norm running statistics). Its saved tensors are checked
against the forward's, as `torch.utils.checkpoint` does, so a layer whose
forward is not repeatable fails loudly instead of training on wrong values.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks
from torch.nn.modules.batchnorm import _BatchNorm

from planopt.errors import PlanoptError
from planopt.runtime.storage import Saves, TensorMeta, view_on


class RecomputeError(PlanoptError, RuntimeError):
    """A recomputed layer did not reproduce the tensors its forward saved."""


@dataclass(frozen=True, slots=True)
class ForwardState:
    """RNG and autocast state at the start of a recompute run's first forward."""

    cpu_rng: torch.Tensor
    cuda_device: int | None
    cuda_rng: torch.Tensor | None
    autocast: tuple[tuple[str, bool, torch.dtype], ...]


def _autocast_state(device_type: str) -> tuple[str, bool, torch.dtype]:
    try:
        return (
            device_type,
            torch.is_autocast_enabled(device_type),
            torch.get_autocast_dtype(device_type),
        )
    except TypeError:  # torch < 2.4: the per-device-type API did not exist
        if device_type == "cuda":
            return device_type, torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype()
        return device_type, torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()


def capture(device: torch.device) -> ForwardState:
    """The state to replay; CUDA's generator only for a CUDA device (guarded)."""
    cuda_device = cuda_rng = None
    types = ["cpu"]
    if device.type == "cuda" and torch.cuda.is_available():
        cuda_device = device.index if device.index is not None else torch.cuda.current_device()
        cuda_rng = torch.cuda.get_rng_state(cuda_device)
        types.append("cuda")
    return ForwardState(
        torch.get_rng_state(), cuda_device, cuda_rng, tuple(_autocast_state(t) for t in types)
    )


@contextlib.contextmanager
def replay(state: ForwardState) -> Iterator[None]:
    """Run with the captured RNG and autocast state; the caller's RNG is restored after."""
    devices = [] if state.cuda_device is None else [state.cuda_device]
    with torch.random.fork_rng(devices=devices), contextlib.ExitStack() as stack:
        torch.set_rng_state(state.cpu_rng)
        if state.cuda_device is not None:
            torch.cuda.set_rng_state(state.cuda_rng, state.cuda_device)
        for device_type, enabled, dtype in state.autocast:
            stack.enter_context(torch.autocast(device_type, dtype=dtype, enabled=enabled))
        yield


class _Alias(torch.autograd.Function):
    """The block's input as a non-leaf over the base's storage: no copy, no reference kept.

    `mark_dirty` turns the tensor itself into the output, so the graph holds
    no tensor of it (a leaf's `AccumulateGrad` would hold the base until the
    block's graph goes, past the block's first forward, where the spec frees
    it) and an in-place op on it is allowed, as on the forward's non-leaf
    input (a block that starts with `ReLU(inplace=True)`).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def block_input(base: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    """A tensor over `base`'s storage for the block's first forward.

    It requires grad as the forward's input did (what an operator saves
    depends on it), and is not a leaf, so nothing in the block's graph keeps
    the base alive and in-place ops on it run as in the forward. Its own
    version counter: the base's readers outside the block are not bumped.
    """
    h = view_on(base, TensorMeta(base))
    if not requires_grad:
        return h
    anchor = torch.empty(0, device=base.device, requires_grad=True)  # no storage
    return _Alias.apply(h, anchor)


def collected(saves: Saves) -> saved_tensors_hooks:
    """Inside a block: record what each forward saves, and let its graph hold nothing."""

    def pack(t: torch.Tensor) -> None:
        saves.add(t)  # the block's own graph is never backpropagated

    def never(_packed: object) -> torch.Tensor:
        raise RuntimeError("the graph built inside a recompute block is never backpropagated")

    return saved_tensors_hooks(pack, never)


_RUNNING = ("running_mean", "running_var", "num_batches_tracked")


@contextlib.contextmanager
def buffers_unchanged(modules: Sequence[nn.Module]) -> Iterator[None]:
    """Leave the buffers the block's layers update (batch-norm statistics) as they were.

    A batch norm in training mode runs the block without its running
    statistics: its output comes from the batch's statistics either way, so
    it is the forward's, nothing is updated a second time and nothing is
    held. Any other buffer is restored from a snapshot held in host memory
    while the block runs: on a GPU the host's RAM, outside the device; on
    CPU the same RAM as the device, so the tracker counts it (the cost
    model does not: keep buffers a recomputed layer updates small).
    """
    unhooked: list[tuple[nn.Module, str, torch.Tensor]] = []
    for module in modules:
        for sub in module.modules():
            if isinstance(sub, _BatchNorm) and sub.training and sub.track_running_stats:
                for name in _RUNNING:
                    buffer = sub._buffers.get(name)
                    if buffer is not None:
                        unhooked.append((sub, name, buffer))
                        sub._buffers[name] = None
    try:
        buffers = [b for m in modules for b in m.buffers()]
        saved = [b.detach().to("cpu", copy=True) for b in buffers]
        try:
            yield
        finally:
            with torch.no_grad():
                for buf, value in zip(buffers, saved, strict=True):
                    buf.copy_(value)
    finally:
        for sub, name, buffer in unhooked:
            sub._buffers[name] = buffer


@dataclass(frozen=True, slots=True)
class SavedMeta:
    """Shape, dtype and device of one tensor a forward saved."""

    shape: torch.Size
    dtype: torch.dtype
    device: torch.device

    @classmethod
    def of(cls, t: torch.Tensor) -> SavedMeta:
        return cls(t.shape, t.dtype, t.device)


def check_same(where: str, index: int, expected: SavedMeta, got: torch.Tensor) -> None:
    """Refuse a recomputed tensor that is not the one the forward saved."""
    if expected.shape != got.shape or expected.dtype != got.dtype or expected.device != got.device:
        raise RecomputeError(
            f"{where}: recomputed saved tensor {index} must match the forward's "
            f"({tuple(expected.shape)}, {expected.dtype}, {expected.device}), got "
            f"({tuple(got.shape)}, {got.dtype}, {got.device}); the layer's forward is not "
            "repeatable (data-dependent shapes or side effects), so it cannot be recomputed"
        )


def check_count(where: str, expected: int, got: int) -> None:
    if expected != got:
        raise RecomputeError(
            f"{where}: recomputation must save as many tensors as the forward ({expected}), "
            f"got {got}; the layer's forward is not repeatable, so it cannot be recomputed"
        )
