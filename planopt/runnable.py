"""The in-place rule: which plans a runtime can run when a layer changes its input in place.

A layer whose forward modifies its input `x_j` in place (`Layer.modifies_input`:
a block that starts with `ReLU(inplace=True)`) leaves the layer below's
output changed after the end of `F_{j-1}`. A swap copies the output at the
end of `F_{j-1}`, a recompute regenerates it from below: both hold the value
*before* the change. So (cost model, "The in-place rule"), for such a layer
`j` and the layer below `i = j - 1` (the batch below layer 0 counts as kept):

* **replayed above kept**: layer `j` is *replayed* (recomputed, or with a
  partial option: its regeneration re-runs its forward from `x_j`) and
  layer `i` is kept: the replay would start from the changed value.
* **read below, not replayed**: layer `j` is not replayed, layer `i` is
  swapped or recomputed and `x_j` has a backward reader besides the layers
  above (`saves_output_i` or `saves_input_j`): that reader would get the
  value before the change.
* **copy racing the change**: layer `j` is replayed above a swapped layer `i`
  and `F_j` does not wait for `i`'s copy out (`swap_wait_i != j`): the copy
  of `x_j` would race the change (its copy out runs beside `F_j`).

A plan that breaks it is not runnable (the executor refuses the first two at
the first forward; the race it cannot see, and `apply` ran all three on other
values), so it is not a plan of the profile: `Plan.check` refuses it and no
method returns one. Keep-all is always runnable, and `repair` turns any plan
into a runnable one by keeping layers (or adding the wait). No torch here:
the planners read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from planopt.action import KEEP, RECOMPUTE, SWAP, Action
from planopt.errors import InvalidPlanError, where

if TYPE_CHECKING:
    from planopt.profile import Profile

REPLAYED_ABOVE_KEPT = "replayed above kept"
READ_BELOW = "read below, not replayed"
COPY_RACE = "copy racing the change"


def reads_below(profile: Profile, j: int) -> bool:
    """Whether `x_j` has a backward reader besides layer `j`'s replay: `B_{j-1}` reads
    its output or `B_j` its input (False for `j = 0`: the batch is the caller's)."""
    if j <= 0:
        return False
    return profile.layers[j - 1].saves_output or profile.layers[j].saves_input


def pair_breaks(
    modifies: bool,
    reads: bool,
    below: Action | None,
    action: Action,
    partial: bool,
    waits: bool = False,
) -> str | None:
    """The clause of the rule that layer `j` breaks (None: runnable).

    `below`: layer `j-1`'s action (None for layer 0: the batch, kept);
    `partial`: layer `j` takes an option; `reads`: `reads_below(profile, j)`;
    `waits`: `F_j` waits for the copy out of layer `j-1` (`swap_wait[j-1] == j`).
    """
    if not modifies:
        return None
    replayed = action is RECOMPUTE or partial
    below_kept = below is None or below is KEEP
    if replayed and below_kept:
        return REPLAYED_ABOVE_KEPT
    if not replayed and not below_kept and reads:
        return READ_BELOW
    if replayed and below is SWAP and not waits:
        return COPY_RACE
    return None


def violations(
    profile: Profile,
    actions: Sequence[Action],
    options: Sequence[str | None] | None = None,
    swap_wait: Sequence[int | None] | None = None,
) -> list[tuple[int, str]]:
    """Every layer `j` that breaks the rule, with the clause, in index order
    (`swap_wait` None: no forward waits for a copy)."""
    out: list[tuple[int, str]] = []
    for j, layer in enumerate(profile.layers):
        if not layer.modifies_input:
            continue
        partial = options is not None and options[j] is not None
        below = actions[j - 1] if j > 0 else None
        waits = j > 0 and swap_wait is not None and swap_wait[j - 1] == j
        clause = pair_breaks(True, reads_below(profile, j), below, actions[j], partial, waits)
        if clause is not None:
            out.append((j, clause))
    return out


def runnable(
    profile: Profile,
    actions: Sequence[Action],
    options: Sequence[str | None] | None = None,
    swap_wait: Sequence[int | None] | None = None,
) -> bool:
    """Whether the plan keeps the in-place rule (always, on a profile without the flag)."""
    if not profile.modifies_inputs:
        return True
    return not violations(profile, actions, options, swap_wait)


def describe(profile: Profile, j: int, clause: str, action: Action, below: Action | None) -> str:
    """The error text for layer `j` breaking `clause` (names both layers)."""
    names = profile.names
    here = where(j, names[j])
    if clause == REPLAYED_ABOVE_KEPT:
        under = "the batch" if j == 0 else f"a kept layer ({where(j - 1, names[j - 1])})"
        return (
            f"{here}: a layer that modifies its input in place must not be replayed "
            f"(recomputed or partial, got {action.value}) above {under}: its replay would "
            "start from the changed value (the in-place rule, docs/cost-model.md); keep it "
            "whole, or swap or recompute the layer below"
        )
    if clause == COPY_RACE:
        return (
            f"{here}: a layer that modifies its input in place and is replayed (got "
            f"{action.value}{', an option' if action is KEEP else ''}) above a swapped layer "
            f"({where(j - 1, names[j - 1])}) must wait for its copy out (swap_wait of layer "
            f"{j - 1} must be {j}): the copy would race the change (the in-place rule, "
            "docs/cost-model.md)"
        )
    return (
        f"{here}: a layer that modifies its input in place must be replayed (recomputed or "
        f"partial), or the layer below kept, when the layer below "
        f"({where(j - 1, names[j - 1])}) is {below.value if below else 'kept'} and its "
        f"output is read in backward, got {action.value} (the copy or the recomputation "
        "holds the value before the change; the in-place rule, docs/cost-model.md)"
    )


def check_runnable(
    profile: Profile,
    actions: Sequence[Action],
    options: Sequence[str | None] | None = None,
    swap_wait: Sequence[int | None] | None = None,
) -> None:
    """Refuse a plan that breaks the rule (`InvalidPlanError` naming the layers)."""
    if not profile.modifies_inputs:
        return
    found = violations(profile, actions, options, swap_wait)
    if found:
        j, clause = found[0]
        below = actions[j - 1] if j > 0 else None
        raise InvalidPlanError(describe(profile, j, clause, actions[j], below))


def repair(
    profile: Profile,
    actions: Sequence[Action],
    prefetch_at: Sequence[int | None],
    swap_wait: Sequence[int | None],
    options: Sequence[str | None] | None = None,
) -> tuple[list[Action], list[int | None], list[int | None], list[str | None] | None]:
    """The plan mended until it keeps the rule (unchanged when it does).

    A copy racing the change is mended by the wait (`swap_wait[j-1] = j`: only
    `F_j` starts later); any other break by keeping a layer: the replayed layer,
    whole (above a kept one), or the layer below (when it is read). Layers only
    move to keep, and keep-all keeps the rule, so this ends; a layer's `need`
    never grows when others are kept, so the other swaps' `prefetch_at` stay valid.
    """
    acts, pre, wait = list(actions), list(prefetch_at), list(swap_wait)
    opts = None if options is None else list(options)
    if not profile.modifies_inputs:
        return acts, pre, wait, opts
    while True:
        found = violations(profile, acts, opts, wait)
        if not found:
            return acts, pre, wait, opts
        j, clause = found[0]
        if clause == COPY_RACE:
            wait[j - 1] = j
            continue
        k = j if clause == REPLAYED_ABOVE_KEPT else j - 1
        if acts[k] is SWAP:
            pre[k] = wait[k] = None
        acts[k] = KEEP
        if opts is not None and k == j:
            opts[k] = None
