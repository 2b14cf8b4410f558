"""A kept or swapped layer with a partial option (cost model v3), run by the chain executor.

The layer's forward runs under non-reentrant `torch.utils.checkpoint` with
the selective-checkpoint contexts of `planopt.runtime.sac` saving exactly
the option's operator positions (`SavePositions`): SAC's cache holds the
option's `h_k` bytes from `F_i` to `B_i`, and checkpoint replays the rest of
the forward at the first unpack inside `B_i` (the cost model's `R_i`). On a
swapped layer the region's `context_fn` is an `OptionCache`
(`planopt.runtime.sacswap`): the layer's `LayerState` copies that cache out
with its swap and back at `prefetch_at`, and `R_i` waits for the copy back.

It composes with the executor's routing: checkpoint saves the layer's input
`x_i` (`_CheckpointFrame.save_inputs`) before its own hooks are pushed, so
the executor's pack hook, still innermost then, routes it to layer `i-1`'s
output like any reader of `x_i` (the cost model: an option reads its input
at step `i`). Above a swapped layer the replay's input is the copy back;
above a recompute run it is the block's regenerated output. Inside the
region, checkpoint's hooks take over, so the executor sees nothing of the
layer's internals.

Early stop is on (torch's default): the replay ends once the last tensor the
backward needs is regenerated, which is what the menu's `r_k` counts
(`planopt.runtime.opprofile`'s `cut`). RNG is restored by checkpoint; buffer
updates made by the replay (batch-norm statistics) are undone.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch.utils.checkpoint import checkpoint

from planopt.errors import ProfileMismatchError, where
from planopt.plan import SWAP
from planopt.profile import Layer
from planopt.runtime.chain import Chain, LossFn
from planopt.runtime.checkpointing import OPTION_EARLY_STOP, buffers_kept
from planopt.runtime.sac import sac_context
from planopt.runtime.sacswap import OptionCache
from planopt.runtime.tracker import at, current_where, regenerating


class Step(Protocol):
    chain: Chain
    layers: list  # of `planopt.runtime.layers.LayerState`
    target: torch.Tensor | None
    loss_fn: LossFn | None


def partial_forward(
    step: Step, i: int, h: torch.Tensor, policy: tuple[int, ...], output_changed: bool = False
) -> torch.Tensor:
    """Layer `i`'s forward on `h` in a selective-checkpoint region saving `policy`
    (`output_changed`: layer `i+1` changes the output in place, `sac_context`)."""
    chain, target, loss_fn = step.chain, step.target, step.loss_fn
    module = chain.layers[i]
    calls = [0]
    state = step.layers[i]
    if state.action is SWAP:  # its kept subset goes to host (`planopt.runtime.sacswap`)
        context = state.cache = OptionCache(policy, output_changed, state.where)
    else:
        context = sac_context(policy, output_changed=output_changed)

    def run(x: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        if calls[0] == 1:
            return chain.run_layer(i, x, target, loss_fn)
        where = current_where()
        at(f"R_{i}")
        state.wait_back()  # R_i reads the copied-back kept subset
        try:
            with buffers_kept([module]), regenerating():
                return chain.run_layer(i, x, target, loss_fn)
        finally:
            at(where)

    return checkpoint(
        run,
        h,
        use_reentrant=False,
        context_fn=context,
        early_stop=OPTION_EARLY_STOP,
    )


def check_partial_products(i: int, spec: Layer, out_bytes: int) -> None:
    """First step: a partial layer's output is the profile's (its internals are
    checkpoint's, unseen by the executor's hooks; the tests measure them)."""
    if out_bytes != spec.out_bytes:
        raise ProfileMismatchError(
            f"{where(i, spec.name)}: products must match the profile, got out_bytes "
            f"{spec.out_bytes!r} (measured {out_bytes!r}); the profile was measured with "
            "another batch shape, dtype, device or loss"
        )
