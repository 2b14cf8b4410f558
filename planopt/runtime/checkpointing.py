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
    _checkpoint_without_reentrant_generator,
    create_selective_checkpoint_contexts,
    noop_context_fn,
)

from planopt.runtime.sac import SavePositions

# A partial option's region replays with early stop (torch's default), as
# the menus' `r_k` assume (`planopt.runtime.menus.add_menus(early_stop=True)`).
OPTION_EARLY_STOP = True


def checkpoint_region(fn, base: torch.Tensor, context_fn=noop_context_fn, early_stop=False):
    """An open non-reentrant checkpoint region replayed by `fn(base)`; `next()` closes it.

    RNG state preserved, the default determinism check. Early stop off for a
    recompute run (the replay must reach the run's top output); on for a
    partial option's region (torch's default: the replay ends after the last
    tensor the backward needs, which is what the menu's `r_k` counts).
    """
    gen = _checkpoint_without_reentrant_generator(
        fn, True, context_fn, "default", False, early_stop, base
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


def sac_context(policy: tuple[int, ...], output_changed: bool = False):
    """Selective checkpoint contexts saving exactly the op positions in `policy`.

    The one policy function is `planopt.runtime.sac.SavePositions` (the
    chain executor's option regions use it too); torch calls it only in the
    forward (the replay reads SAC's cache by index), so one counter serves.
    `output_changed`: the block above changes this block's output in place
    (`planopt.runtime.sac.sac_context` says why SAC may let that entry change).
    """
    return create_selective_checkpoint_contexts(
        SavePositions(policy), allow_cache_entry_mutation=output_changed
    )
