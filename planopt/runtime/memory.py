"""Static memory of a training step, and the saved-tensor accounting of the executor.

`static_bytes` is the spec's always-resident memory; `Tracker` follows the
saved tensors the executor holds on the device side, allocation by
allocation, so on CPU (where the caching allocator's statistics do not
exist) the peak of a step can still be measured exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from planopt.runtime.storage import tensor_nbytes


@dataclass(frozen=True, slots=True)
class StaticBytes:
    """The parts of `static_bytes`; `note` says how the optimizer state was counted."""

    params: int
    grads: int
    buffers: int
    optimizer: int
    batch: int
    note: str

    @property
    def total(self) -> int:
        return self.params + self.grads + self.buffers + self.optimizer + self.batch


# Moments per trainable parameter of optimizers that allocate their state at
# their first step (used when the optimizer has not stepped yet).
_STATE_PER_PARAM = {"Adam": 2, "AdamW": 2, "NAdam": 2, "RAdam": 2, "Adamax": 2, "Adagrad": 1}


def _optimizer_state(optimizer: torch.optim.Optimizer | None, trainable: int) -> tuple[int, str]:
    if optimizer is None:
        return 0, "no optimizer state"
    tensors = [
        v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)
    ]
    if tensors:
        return tensor_nbytes(tensors), "optimizer state as allocated"
    name = type(optimizer).__name__
    per_param = _STATE_PER_PARAM.get(name)
    if per_param is None and name == "SGD":
        per_param = 1 if any(g.get("momentum", 0) for g in optimizer.param_groups) else 0
    if per_param is None:
        return 0, f"optimizer state of {name} unknown before its first step (counted 0)"
    return per_param * trainable, f"{name} state estimated as {per_param} x trainable parameters"


def static_bytes(
    chain: nn.Module,
    batch: Iterable[torch.Tensor | None],
    optimizer: torch.optim.Optimizer | None = None,
) -> StaticBytes:
    """Parameters, one gradient per trainable parameter, buffers, optimizer state, batch."""
    params = list(chain.parameters())
    trainable = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    opt, note = _optimizer_state(optimizer, trainable)
    return StaticBytes(
        params=tensor_nbytes(params),
        grads=trainable,
        buffers=tensor_nbytes(chain.buffers()),
        optimizer=opt,
        batch=tensor_nbytes(t for t in batch if isinstance(t, torch.Tensor)),
        note=note,
    )


class Tracker:
    """Bytes of saved tensors held on the device side, with their running peak.

    The executor calls `alloc`/`free` exactly where the spec's memory table
    allocates and frees `s_i` (see `planopt.runtime.executor`); `log` keeps
    the events when asked, for tests and debugging.
    """

    __slots__ = ("held", "log", "peak")

    def __init__(self, keep_log: bool = False) -> None:
        self.held = 0
        self.peak = 0
        self.log: list[tuple[str, int, int]] | None = [] if keep_log else None

    def alloc(self, what: str, layer: int, nbytes: int) -> None:
        if nbytes:
            self.held += nbytes
            if self.held > self.peak:
                self.peak = self.held
            if self.log is not None:
                self.log.append((what, layer, nbytes))

    def free(self, what: str, layer: int, nbytes: int) -> None:
        if nbytes:
            self.held -= nbytes
            if self.log is not None:
                self.log.append((what, layer, -nbytes))
