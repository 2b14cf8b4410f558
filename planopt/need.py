"""Who reads a layer's products in backward, under a plan: `need(i)` and block steps.

Kept apart from `planopt.plan` (the Plan record and its checks) because the
simulator, the solvers and the plan's own checks all ask these questions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from planopt.action import RECOMPUTE, Action

if TYPE_CHECKING:
    from planopt.profile import Profile


def reads_input(
    profile: Profile | None, n: int, options: Sequence[str | None] | None = None
) -> list[bool]:
    """Whether each layer's backward step reads its input `x_i` (length `n`).

    `saves_input` (spec v2), or, in version 3, a chosen option: its
    regeneration `R_i` re-runs part of `F_i` from `x_i`. Without a profile,
    version 1's rule: no layer reads its input.
    """
    if profile is None:
        return [False] * n
    flags = [layer.saves_input for layer in profile.layers]
    if options is not None:
        for i, option in enumerate(options):
            if option is not None:
                flags[i] = True
    return flags


def block_step(
    actions: Sequence[Action],
    top: int,
    profile: Profile | None = None,
    options: Sequence[str | None] | None = None,
) -> int:
    """The backward step at which the recompute run ending at `top` is regenerated.

    `top + 1` when that layer exists and its backward step reads the run's
    top output (`saves_input`, or a chosen option in version 3), else `top`
    (spec v2: "The plan"; without a profile, version 1's rule: always `top`).
    """
    nxt = top + 1
    if profile is None or nxt >= len(actions):
        return top
    chosen = options is not None and options[nxt] is not None
    return nxt if profile.layers[nxt].saves_input or chosen else top


def need_indices(
    actions: Sequence[Action],
    profile: Profile | None = None,
    options: Sequence[str | None] | None = None,
) -> list[int]:
    """`need(i)` for every layer: the highest backward step holding a reader of layer
    `i`'s products (`i`, `i+1`, or the step of the recompute block above), `i` if none.

    Without a profile, version 1's rule (every layer's backward reads its own
    output, none reads its input): `i`, or the top of the recompute run above.
    Version 2's need is never below version 1's, so a plan valid for the
    profile also passes the profile-free check. In version 3 a layer with a
    chosen option reads its input (its regeneration does), as if it saved it.
    """
    n = len(actions)
    need = list(range(n))
    reads_in = reads_input(profile, n, options)
    i = n - 1
    while i >= 0:
        if actions[i] is RECOMPUTE:
            top = i
            j = i
            while j >= 0 and actions[j] is RECOMPUTE:
                j -= 1
            # j is the base below the run (or -1); the run is j+1 .. top.
            if j >= 0:
                nxt = top + 1
                need[j] = nxt if nxt < n and reads_in[nxt] else top
            i = j
        else:
            i -= 1
    if profile is not None:
        for i in range(n - 1):
            if reads_in[i + 1] and need[i] < i + 1:
                need[i] = i + 1
    return need


def recompute_runs(actions: Sequence[Action]) -> list[tuple[int, int]]:
    """Maximal runs of recompute layers as `(first, top)`, bottom to top."""
    runs: list[tuple[int, int]] = []
    i, n = 0, len(actions)
    while i < n:
        if actions[i] is RECOMPUTE:
            j = i
            while j + 1 < n and actions[j + 1] is RECOMPUTE:
                j += 1
            runs.append((i, j))
            i = j + 1
        else:
            i += 1
    return runs
