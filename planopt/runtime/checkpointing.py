"""Pieces of `torch.utils.checkpoint` a plan's step uses beyond one call per region.

* `checkpoint_region`: the generator `torch.utils.checkpoint.checkpoint(...,
  use_reentrant=False)` steps around one call; stepped around several blocks'
  calls here, it makes a recompute run one region (`planopt.runtime.applystep`);
* `Trigger`: a tiny saved tensor inside a region, whose unpacking regenerates
  the region at the moment the step chooses;
* `buffers_kept`: a replay must not update batch-norm statistics twice;
* `sac_context`: selective-checkpoint contexts that save exactly the op
  positions a partial option lists (cost model v3). Positions count, in
  forward order, the ops the selective-checkpoint mode hands its policy (it
  skips `torch.utils.checkpoint.SAC_IGNORED_OPS`: detach, size queries), in
  the forward and in the recomputation alike.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.utils._mode_utils import no_dispatch
from torch.utils.checkpoint import (
    CheckpointPolicy,
    _checkpoint_without_reentrant_generator,
    create_selective_checkpoint_contexts,
    noop_context_fn,
)


def checkpoint_region(fn, base: torch.Tensor, context_fn=noop_context_fn):
    """An open non-reentrant checkpoint region replayed by `fn(base)`; `next()` closes it.

    RNG state preserved, the default determinism check, early stop off (the
    replay must reach the region's top output).
    """
    gen = _checkpoint_without_reentrant_generator(
        fn, True, context_fn, "default", False, False, base
    )
    next(gen)
    return gen


class Trigger(torch.autograd.Function):
    """Saves one tiny tensor inside a checkpoint region: unpacking it regenerates the region."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x.detach().clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


@contextlib.contextmanager
def buffers_kept(modules) -> Iterator[None]:
    """Undo buffer updates made by a replay (batch-norm statistics would move twice).

    The snapshot is planopt's bookkeeping, taken outside the dispatcher so no
    memory tracker (torch's `MemTracker` included) takes it for the model's.
    """
    buffers = [b for m in modules for b in m.buffers()]
    with no_dispatch():
        saved = [b.detach().clone() for b in buffers]
    try:
        yield
    finally:
        with no_dispatch(), torch.no_grad():
            for buf, value in zip(buffers, saved, strict=True):
                buf.copy_(value)


def sac_context(policy: tuple[int, ...]):
    """Selective checkpoint contexts saving exactly the op positions in `policy`."""
    keep = frozenset(policy)
    counters = {False: 0, True: 0}

    def policy_fn(ctx, op, *args, **kwargs) -> CheckpointPolicy:
        position = counters[ctx.is_recompute]
        counters[ctx.is_recompute] += 1
        return CheckpointPolicy.MUST_SAVE if position in keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy_fn)
