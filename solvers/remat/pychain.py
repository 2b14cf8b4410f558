"""`chain`'s segment costs in plain Python, built row by row only as far as a room needs.

NOTE (why a second model). On a chain of a few dozen layers `ChainModel`
spends its time on numpy's per-call overheads: a hundred-odd calls on
arrays of 16 numbers (0.1 ms at 16 layers, more than the whole search
below it). This class computes the same numbers, by the same formulas
(`chain`'s note holds the theorem), with Python lists, and each row of the
cost table `c(k, t)` only up to the first top whose growing terms (the
forwards' and the run's backwards', nondecreasing in `t`) exceed the room
asked for: no top above it can fit (`ChainModel.last_feasible_top`'s
argument). A row asked for with a larger room is extended where it
stopped. The tests check every number against `ChainModel`.
"""

from __future__ import annotations

import math

from planopt.profile import Profile
from solvers.remat.chain import NEG, plan_peak, plan_segments
from solvers.remat.rule import FORBID, rule_masks


class PyChain:
    """A profile's segment numbers as lists (node `k` at index `k + 1`, as in `ChainModel`).

    `near[x]` is `c(k, k)`; `row(x, limit)` the costs `c(k, t)` of far
    edges for `t = x, x+1, ...` up to the last top that can be within
    `limit`; `last(x)` is `c(k, L-1)`; `held` what a kept layer adds to `H`.
    """

    def __init__(self, profile: Profile) -> None:
        layers = profile.layers
        n = self.n = len(layers)
        self.profile = profile
        self.static = profile.static_bytes
        self.fwd = [x.fwd for x in layers]
        o = [x.out_bytes for x in layers]
        s = [x.saved_bytes for x in layers]
        so = [x.saves_output for x in layers]
        si = [x.saves_input for x in layers] + [False]
        g = [x.input_grad_bytes for x in layers] + [0, 0]
        pg_from = [0] * (n + 2)  # sum of pg_i for i >= index
        for i in range(n - 1, -1, -1):
            pg_from[i] = pg_from[i + 1] + layers[i].param_grad_bytes
        self.pg_total = pg_from[0]
        r = [s[i] + (o[i] if so[i] or si[i + 1] else 0) for i in range(n)]
        p = [s[i] + o[i] + layers[i].fwd_work_bytes for i in range(n)]
        bl = [
            s[i] + (o[i] if so[i] else 0) + g[i + 1] + g[i] + pg_from[i] + layers[i].bwd_work_bytes
            for i in range(n)
        ]
        big_r = [0] * (n + 1)
        for i in range(n):
            big_r[i + 1] = big_r[i] + r[i]
        so_ = [s[i] + o[i] for i in range(n)]
        self.base = [0, *so_]
        self.r_node = [0, *r]
        self.r_below = [0, *big_r[:n]]
        tf = [x.fwd > 0 for x in layers]
        tb = [x.bwd > 0 for x in layers]
        self.kb = [big_r[i] + bl[i] if tb[i] else NEG for i in range(n)]
        self.bl = [bl[i] if tb[i] else NEG for i in range(n)]
        self.kq = [NEG] + [big_r[i - 1] + so_[i - 1] + p[i] if tf[i] else NEG for i in range(1, n)]
        self.kf = [NEG] + [o[i - 1] + p[i] if tf[i] else NEG for i in range(1, n)]
        self.pa = [p[i] if tf[i] else NEG for i in range(n)]
        above, after, before = [], [], []
        for t in range(n):
            nxt = t + 1
            if nxt < n and si[nxt]:  # the block runs at t+1
                above.append(s[nxt] + (o[nxt] if so[nxt] else 0) + g[t + 2] + pg_from[t + 2])
                after.append(self.kb[nxt])
                before.append(NEG)
            else:
                above.append(g[t + 1] + pg_from[t + 1])
                after.append(NEG)
                before.append(self.bl[nxt] if nxt < n else NEG)
        self.above, self.top_after, self.top_before = above, after, before
        near = [NEG] * (n + 1)
        for x in range(n):
            fwd = self.base[x] + self.pa[x] if self.pa[x] > NEG else NEG
            bwd = self.r_node[x] + self.bl[x] if self.bl[x] > NEG else NEG
            near[x] = max(fwd, bwd)
        self.near = near
        # Per row: the costs so far (`rows`, read directly by the hot loops), the
        # growing terms at its last top (`grown`: every top past it costs at least
        # this; a row is extended only for a larger limit), the running maxima.
        self.rows: list[list[int]] = [[] for _ in range(n + 1)]
        # The in-place rule: far edges it forbids cost FORBID (`solvers.remat.rule`).
        masks = rule_masks(profile)
        self.no_start, self.no_top = masks if masks is not None else ([False] * (n + 1), None)
        self.grown: list[int] = [NEG] * (n + 1)
        self._state: list[tuple[int, int, int] | None] = [None] * (n + 1)

    # -- far edges -------------------------------------------------------------

    def row(self, x: int, limit: float) -> list[int]:
        """`c(k, t)` for `t = x, x+1, ...` (`k = x - 1`): every top up to `L-1` whose
        growing terms are within `limit`, and possibly more (a row only grows)."""
        costs = self.rows[x]
        n = self.n
        start = x + len(costs)
        if start >= n or self.grown[x] > limit:
            return costs
        state = self._state[x]
        fmax, bmax, qmax = (NEG, NEG, NEG) if state is None else state
        base, rk = self.base[x], self.r_below[x]
        pa = base + self.pa[x] if x < n and self.pa[x] > NEG else NEG
        kf, kb, kq, above = self.kf, self.kb, self.kq, self.above
        after, before = self.top_after, self.top_before
        banned_row, no_top = self.no_start[x], self.no_top
        for t in range(start, n):  # (comparisons, not max(): this is the hot loop)
            if t + 1 < n and kf[t + 1] > fmax:  # F_{t+1}, reading x_{t+1}
                fmax = kf[t + 1]
            if kb[t] > bmax:  # B_t in the run
                bmax = kb[t]
            if t > x and kq[t] > qmax:  # F'_t in the block
                qmax = kq[t]
            envelope = pa  # the forwards' and the run's backwards' terms
            if fmax > NEG and fmax + base > envelope:
                envelope = fmax + base
            if bmax > NEG and bmax - rk > envelope:
                envelope = bmax - rk
            cost = envelope
            inner = qmax - rk if qmax > NEG and qmax - rk > pa else pa
            if inner > NEG and inner + above[t] > cost:
                cost = inner + above[t]
            if after[t] > NEG and after[t] - rk > cost:
                cost = after[t] - rk
            if before[t] > NEG and before[t] + base > cost:
                cost = before[t] + base
            if banned_row or (no_top is not None and no_top[t]):
                cost = FORBID  # the in-place rule forbids this segment
            costs.append(cost)
            if envelope > limit:  # no top above this one fits
                break
        self._state[x] = (fmax, bmax, qmax)
        self.grown[x] = envelope
        return costs

    def last(self, x: int) -> int:
        """`c(k, L-1)`: the run from `k+1` to the top (NEG for `x = L`: nothing above)."""
        if x >= self.n:
            return NEG
        costs = self.row(x, math.inf)
        return costs[self.n - 1 - x]

    # -- plans (the interface `certify` reads) -------------------------------------

    def held(self, k: int, t: int) -> int:
        """What kept layer `k` adds to `H` when its run ends at `t`."""
        return self.r_node[k + 1] if t == k else self.base[k + 1]

    def cost(self, k: int, t: int) -> int:
        if t == k:
            return self.near[k + 1]
        return self.row(k + 1, math.inf)[t - k - 1]

    def segments(self, kept) -> list[tuple[int, int]]:
        return plan_segments(self.n, kept)

    def peak(self, kept) -> int:
        return plan_peak(self, kept)
