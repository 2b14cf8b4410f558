"""A menu entry applied: selective activation checkpointing that saves given operator positions.

    out = checkpoint(block, x, use_reentrant=False, context_fn=sac_context(entry.policy))

`SavePositions` is a policy function for torch's
`create_selective_checkpoint_contexts`: it counts the calls torch makes to
it (one per operator of the forward, `SAC_IGNORED_OPS` excepted, the
counting `planopt.runtime.opprofile` uses) and answers `MUST_SAVE` at the
given positions, `PREFER_RECOMPUTE` elsewhere. One instance serves one
checkpointed call, so `sac_context` makes a fresh one per call.

`held_under_policy` runs a block that way and reads, with the live-storage
tracker, what stays held between its forward and its backward: the evidence
for a menu's `saved_bytes`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from planopt.runtime.storage import storage_key, storage_nbytes
from planopt.runtime.tracker import LiveMemory


class SavePositions:
    """SAC policy: MUST_SAVE the operators at `positions`, PREFER_RECOMPUTE the rest."""

    def __init__(self, positions: Iterable[int]) -> None:
        self.positions = frozenset(positions)
        self.count = 0

    def __call__(self, ctx, op, *args, **kwargs) -> CheckpointPolicy:
        position = self.count
        self.count += 1
        if position in self.positions:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE


def sac_context(positions: Iterable[int], *, output_changed: bool = False) -> Callable[[], tuple]:
    """A `context_fn` for `torch.utils.checkpoint.checkpoint` saving `positions`.

    `output_changed`: the layer above changes this layer's output in place (its
    `modifies_input`). SAC's cache may hold that output (an op's result it saves
    is the region's output) and would refuse the changed entry at the replay;
    nothing in the region reads its own output back, and `B_i` does not read it
    (plain autograd would refuse the change otherwise), so the entry is let be.
    Mutations inside the region are still refused where menus are measured.
    """
    positions = tuple(positions)
    return lambda: create_selective_checkpoint_contexts(
        SavePositions(positions), allow_cache_entry_mutation=output_changed
    )


@dataclass(frozen=True, slots=True)
class PolicyRun:
    """One checkpointed forward and backward of a block under a policy.

    `held`: tracker bytes alive after the forward beyond those before it,
    the block's output excluded; `replay`: seconds of checkpoint's replay of
    the forward; `output`, `grads`: for comparison with plain autograd.
    """

    held: int
    replay: float
    output: torch.Tensor
    grads: tuple[torch.Tensor | None, ...]


def held_under_policy(
    block: nn.Module,
    x: torch.Tensor,
    positions: Iterable[int],
    kwargs: dict | None = None,
    timer: str = "wall",
) -> PolicyRun:
    """Run `block(x, **kwargs)` under `checkpoint` with `sac_context(positions)` (module doc).

    `x` must require grad; the backward seeds the (first) output with ones.
    `timer`: "wall" or "thread" (the thread's CPU time), as for `trace_block`.
    """
    now = time.thread_time if timer == "thread" else time.perf_counter
    kwargs = kwargs or {}
    calls: list[float] = []

    def fn(h: torch.Tensor) -> Any:
        start = now()
        try:
            return block(h, **kwargs)
        finally:
            calls.append(now() - start)

    tracker = LiveMemory(x.device.type)
    tracker.track_model(block, [x, *tree_flatten(kwargs)[0]])
    with tracker:
        before = tracker.current
        out = checkpoint(fn, x, use_reentrant=False, context_fn=sac_context(positions))
        first = out[0] if isinstance(out, tuple) else out
        held = tracker.current - before - storage_nbytes(first)
        first.backward(torch.ones_like(first))
    if storage_key(first) == storage_key(x):
        raise ValueError("held_under_policy: the block returned its input's storage")
    grads = (x.grad, *(p.grad for p in block.parameters()))
    return PolicyRun(held, calls[1] if len(calls) > 1 else 0.0, first.detach(), grads)
