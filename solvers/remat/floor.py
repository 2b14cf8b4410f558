"""A proven lower bound on the recompute-only space's minimum budget, in O(L log L).

NOTE (why, and the proof). Far below the space's minimum, remat-dp would
build its model and run the exact minimum search only to say "infeasible"
(0.2 ms at 16 layers, where Rotor's C answers in 0.01-0.04 ms); this bound
answers first when the budget is below it, reading the layers once.

Take any keep/recompute plan, `K` its kept layers, and a backward step `t`
of positive duration (every step is one, or no bound is claimed). By
`chain`'s theorem the memory inside `B_t` is at least `static + bl_t` plus
`r_j` for every kept `j < t` and every layer `j < t` of `t`'s own run (a
kept layer holds `r_j` or more; the run's regenerated layers hold `r_j`):
in a run the term is `H_k + R(t) - R(k) + bl_t`; a kept `t` is the step
above a segment, `H_k + r_k + bl_t`, `H_k + base_k + bl_t` or `H_k + R(t)
- R(k) + bl_t`, each at least the kept layers' share. Call that count of
live layers `c(t)`. If every `c(t) <= X`: a kept layer with `q` kept
below has `c = q`, so at most `X + 1` are kept; a run with `q` kept below
has `c = q + length - 1` at its top, so its length is at most `X - q + 1`,
and two runs never share `q` (a kept layer lies between them). So `L <=
(X+1)(X+2)/2 + X + 1`: on a longer chain some step has `c(t) >= X + 1`.
With `X` the least count this forces, every plan's peak is at least
`static` plus the `X` smallest `r_j` (`j <= L-2`) plus the smallest `bl_t`
(and at least `static + sum(pg)`, the end of the step). The tests check it
against enumeration.
"""

from __future__ import annotations

from planopt.profile import Profile


def live_layers(n: int) -> int:
    """The least `X` with `(X+1)(X+2)/2 + X + 1 >= n`: some backward of every plan of an
    `n`-layer chain holds at least this many layers below it (see the module note)."""
    x = 0
    while (x + 1) * (x + 2) // 2 + x + 1 < n:
        x += 1
    return x


def budget_floor(profile: Profile) -> int:
    """Bytes (static included) below which no keep/recompute plan of `profile` fits."""
    layers = profile.layers
    n = len(layers)
    pg_total = sum(x.param_grad_bytes for x in layers)
    floor = profile.static_bytes + pg_total
    if any(x.bwd <= 0 for x in layers):  # a step of no duration holds no peak
        return floor
    # r_j: what layer j holds once kept (or regenerated) below a later step
    r = [
        x.saved_bytes
        + (x.out_bytes if x.saves_output or (j + 1 < n and layers[j + 1].saves_input) else 0)
        for j, x in enumerate(layers[:-1])
    ]
    # bl_t: what B_t itself reads, writes and holds (the theorem's bl)
    below = 0  # the parameter gradients of the steps above t (held to the end)
    smallest_bl = None
    for t in range(n - 1, -1, -1):
        x = layers[t]
        above = layers[t + 1].input_grad_bytes if t + 1 < n else 0
        bl = (
            x.saved_bytes
            + (x.out_bytes if x.saves_output else 0)
            + above
            + x.input_grad_bytes
            + below
            + x.param_grad_bytes
            + x.bwd_work_bytes
        )
        below += x.param_grad_bytes
        smallest_bl = bl if smallest_bl is None else min(smallest_bl, bl)
    live = sum(sorted(r)[: live_layers(n)])
    return max(floor, profile.static_bytes + live + smallest_bl)
