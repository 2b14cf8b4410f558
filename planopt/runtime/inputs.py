"""The runtime API's arguments, checked once where they enter (`planopt.runtime.errors`).

`profile`, `measure`, `check`, `plain_step_seconds`, `trace_profile` and the
`Executor` call these before any torch work, so a wrong argument gets a
`PlanoptError` naming the rule and the value, not an error from inside a
step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from planopt.errors import show
from planopt.runtime.chain import Chain
from planopt.runtime.errors import BatchError, ChainError, LossFnError, RuntimeOptionError


def check_chain(chain: Any, fn: str) -> Chain:
    if not isinstance(chain, Chain):
        raise ChainError(
            f"{fn}: chain must be a planopt.runtime.Chain (Chain.from_modules(...)), got "
            f"{type(chain).__name__}"
        )
    return chain


def check_batch(batch: Any, fn: str) -> tuple[torch.Tensor, torch.Tensor]:
    """`(inputs, targets)`: a pair of tensors."""
    if isinstance(batch, torch.Tensor):
        raise BatchError(
            f"{fn}: batch must be a pair (inputs, targets) of tensors, got one tensor of "
            f"shape {tuple(batch.shape)}; pass (x, y)"
        )
    if not isinstance(batch, tuple | list) or len(batch) != 2:
        got = (
            f"a {type(batch).__name__} of {len(batch)}"
            if isinstance(batch, tuple | list)
            else (type(batch).__name__)
        )
        raise BatchError(f"{fn}: batch must be a pair (inputs, targets) of tensors, got {got}")
    for what, t in zip(("inputs", "targets"), batch, strict=True):
        if not isinstance(t, torch.Tensor):
            raise BatchError(f"{fn}: batch {what} must be a tensor, got {type(t).__name__}")
    return batch[0], batch[1]


def check_loss_fn(loss_fn: Any, fn: str) -> Callable | None:
    """A callable, or None when the chain's last layer returns the loss itself."""
    if loss_fn is not None and not callable(loss_fn):
        raise LossFnError(
            f"{fn}: loss_fn must be a callable (output, target) -> scalar loss, or None "
            f"when the chain's last layer returns the loss, got {show(loss_fn)}"
        )
    return loss_fn


def check_loss(loss: torch.Tensor, loss_fn: Callable | None, fn: str) -> None:
    """What a step's backward starts from must be one number."""
    if loss.numel() != 1:
        what = "loss_fn" if loss_fn is not None else "the chain's last layer (loss_fn is None)"
        raise LossFnError(
            f"{fn}: {what} must return a scalar loss, got a tensor of shape "
            f"{tuple(loss.shape)}; pass loss_fn=(output, target) -> scalar, or reduce it"
        )


def check_count(name: str, value: Any, minimum: int, fn: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RuntimeOptionError(f"{fn}: {name} must be an integer >= {minimum}, got {show(value)}")
    return value


def check_choice(name: str, value: Any, choices: tuple[str, ...], fn: str) -> str:
    if value not in choices:
        raise RuntimeOptionError(
            f"{fn}: {name} must be one of {', '.join(choices)}, got {show(value)}"
        )
    return value
