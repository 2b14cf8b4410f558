"""Static memory of a training step: the spec's always-resident `static_bytes`.

What a step really holds beyond it is measured, not counted here: by the
live-storage tracker or the CUDA allocator (`planopt.runtime.tracker`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from planopt.runtime.storage import tensor_nbytes
from planopt.runtime.tracker import device_bytes


@dataclass(frozen=True, slots=True)
class StaticBytes:
    """The parts of `static_bytes`; `note` says how the optimizer state was counted.

    `loss`: the loss and the gradient `backward()` seeds it with, which the
    caller holds through the whole backward (the model frees the last
    layer's output at the end of its forward).
    """

    params: int
    grads: int
    buffers: int
    optimizer: int
    batch: int
    note: str
    loss: int = 0
    other: int = 0  # CUDA: allocated besides the model's tensors (cuBLAS workspaces...)

    @property
    def total(self) -> int:
        tensors = self.params + self.grads + self.buffers + self.optimizer + self.batch
        return tensors + self.loss + self.other


# Moments per trainable parameter of optimizers that allocate their state at
# their first step (used when the optimizer has not stepped yet).
_STATE_PER_PARAM = {"Adam": 2, "AdamW": 2, "NAdam": 2, "RAdam": 2, "Adamax": 2, "Adagrad": 1}
# These also keep a float32 `step` per parameter: on the parameter's device
# when the group is `capturable` or `fused`, else on the CPU.
_STEP_BYTES = 4


def _step_counters(optimizer: torch.optim.Optimizer) -> int:
    """Device bytes of the `step` tensors the first step will allocate."""
    total = 0
    for group in optimizer.param_groups:
        on_device = bool(group.get("capturable") or group.get("fused"))
        for p in group["params"]:
            if p.requires_grad and (on_device or p.device.type == "cpu"):
                total += device_bytes(_STEP_BYTES, p.device)
    return total


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
    if per_param is not None:
        estimate = per_param * trainable + _step_counters(optimizer)
        return estimate, (
            f"{name} state estimated as {per_param} x trainable parameters and a step counter each"
        )
    if name == "SGD":
        per_param = 1 if any(g.get("momentum", 0) for g in optimizer.param_groups) else 0
        return per_param * trainable, f"SGD state estimated as {per_param} x trainable parameters"
    return 0, f"optimizer state of {name} unknown before its first step (counted 0)"


def static_bytes(
    chain: nn.Module,
    batch: Iterable[torch.Tensor | None],
    optimizer: torch.optim.Optimizer | None = None,
    *,
    grads: bool = True,
    loss_bytes: int = 0,
    resident: int = 0,
) -> StaticBytes:
    """Parameters, buffers, optimizer state, batch and (`grads`) one gradient per
    trainable parameter; without `grads` the gradients are set to None between
    steps and counted per layer (`param_grad_bytes`). `loss_bytes`: the loss's
    storage and the gradient `backward()` seeds it with. `resident`: the bytes
    the device's allocator holds as a step starts; what it holds beyond the
    tensors counted here is `other`."""
    params = list(chain.parameters())
    trainable = sum(
        device_bytes(p.numel() * p.element_size(), p.device) for p in params if p.requires_grad
    )
    opt, note = _optimizer_state(optimizer, trainable)
    parts = dict(
        params=tensor_nbytes(params),
        grads=trainable if grads else 0,
        buffers=tensor_nbytes(chain.buffers()),
        optimizer=opt,
        batch=tensor_nbytes(t for t in batch if isinstance(t, torch.Tensor)),
    )
    other = max(0, resident - sum(parts.values())) if resident else 0
    return StaticBytes(**parts, note=note, loss=loss_bytes, other=other)
