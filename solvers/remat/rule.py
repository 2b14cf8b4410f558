"""The in-place rule in the segments' terms: which segments `(k, t)` no plan may use.

`planopt.runnable` holds the rule. In a keep/recompute plan cut into segments
(`solvers.remat.chain`: kept layer `k`, the run `k+1 .. t`, the next kept
layer `t+1`), a layer `j` that modifies its input in place breaks it exactly
when a run starts at `j` (above kept `k = j - 1`, or the batch for `j = 0`:
its replay would start from the changed value), or a run ends at `t = j - 1`
below a kept `j` whose input has a backward reader below (`x_j` read as
regenerated, before the change). Both concern non-empty runs only, so a
segment `(k, t)`, `t > k`, is forbidden when `no_start[k + 1]` or
`no_top[t]`: its cost becomes `FORBID`, more than any room, and every search
over the segments (labels, walks, bounds' passes) leaves it out.
"""

from __future__ import annotations

from planopt.profile import Profile
from planopt.runnable import reads_below

# More than any room (`room_cap`), and sums of a few stay inside int64.
FORBID = 1 << 61


def room_cap(room: int) -> int:
    """`room`, at most 2^60: no real plan's bytes come near (every sum stays below
    2^55), and a forbidden segment (`FORBID`) never fits."""
    return min(room, 1 << 60)


def rule_masks(profile: Profile) -> tuple[list[bool], list[bool]] | None:
    """`(no_start, no_top)`: `no_start[a]` (a = k + 1, length L + 1) says no run may
    start at layer `a`; `no_top[t]` (length L) says no run may end at `t` below a kept
    `t + 1`. None when no layer modifies its input (nothing is forbidden)."""
    if not profile.modifies_inputs:
        return None
    layers = profile.layers
    n = len(layers)
    no_start = [layers[a].modifies_input if a < n else False for a in range(n + 1)]
    no_top = [
        t + 1 < n and layers[t + 1].modifies_input and reads_below(profile, t + 1) for t in range(n)
    ]
    return no_start, no_top
