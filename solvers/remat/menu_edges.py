"""The menu search's edges, a layer at a time with numpy: `MenuChain.row`'s numbers.

NOTE (why a layer at a time, and why it is the same). `MenuChain.row(k, a)`
walks the tops `t` of a run above kept layer `k` keeping running maxima;
each is a prefix maximum (`numpy.maximum.accumulate`) of a per-top term,
and the bytes the run's regenerated layers hold are a prefix sum. Every
term of a segment's cost and of what `k` holds carries `k`'s own held bytes
once (`base = h + o_k`, `r_k = h + ...`, and the run's holdings start from
`r_k`), so `cost(k, a, t, b) = h(k, a) + cost(k, t, b)` with `h = 0`, and
the same for `held` and `growing` (a term that does not exist, `NEG`, stays
`NEG`). One pass per layer with `h = 0` then serves each of its choices,
shifted. A row stops, as `row`'s reader did, at the first top whose
`growing` terms exceed the room (they only grow with `t`); the empty run
(`t = k`) is `MenuChain.segment` itself. `tests/test_remat_menu_speed.py`
checks the arrays against `row` entry by entry.
"""

from __future__ import annotations

import numpy as np

from solvers.remat.menus import NEG, MenuChain
from solvers.remat.rule import FORBID

LOW = NEG // 2  # anything below this is "no term" (NEG plus bytes)


class MenuEdges:
    """Per-layer constants of `MenuChain.row`, as arrays."""

    def __init__(self, chain: MenuChain) -> None:
        self.chain = chain
        self.tried = 0  # segment costs computed (the work charged)
        self._cached: tuple | None = None  # ((k, room), layer k's pass with h = 0)
        n = chain.n
        i64 = np.int64
        o, s, p = (np.array(v, dtype=i64) for v in (chain.o, chain.s, chain.p))
        so = np.array(chain.so, dtype=bool)
        si = np.array(chain.si, dtype=bool)  # length n + 1
        tf, tb = np.array(chain.tf, dtype=bool), np.array(chain.tb, dtype=bool)
        bl = np.array(chain.bl, dtype=i64)
        g = np.array(chain.g, dtype=i64)
        pg = np.array(chain.pg_from, dtype=i64)
        self.fwd = np.array(chain.fwd, dtype=np.float64)
        # w_j: what regenerated layer j holds once the run goes on above it; W prefix sums
        w = s + np.where(so | si[1 : n + 1], o, 0)
        self.W = np.concatenate(([0], np.cumsum(w))).astype(i64)
        W = self.W
        # q_t (F'_t in the block, t >= k+2), b_t (B_t), f_t (F_{t+1} after t), per top t
        q = np.full(n, NEG, dtype=i64)
        q[1:] = np.where(tf[1:], W[: n - 1] + s[: n - 1] + o[: n - 1] + p[1:], NEG)
        self.q = q
        self.b = np.where(tb, W[:n] + bl, NEG)
        f = np.full(n, NEG, dtype=i64)
        f[: n - 1] = np.where(tf[1:], o[: n - 1] + p[1:], NEG)
        self.f = f
        self.pfirst = np.where(tf, p, NEG)
        # per target layer j = t + 1 and its choice c (padded): above, step terms, regen
        width = max(len(c) for c in chain.choices)
        self.width = width
        h = np.zeros((n, width), dtype=i64)
        r = np.zeros((n, width))
        regen = np.full((n, width), NEG, dtype=i64)
        valid = np.zeros((n, width), dtype=bool)
        for j, menu in enumerate(chain.choices):
            for c, (name, hc, rc, wc) in enumerate(menu):
                h[j, c], r[j, c], valid[j, c] = hc, rc, True
                if name is not None and rc > 0:
                    regen[j, c] = s[j] + (o[j] if so[j] else 0) + wc + g[j + 1] + pg[j + 1]
        self.valid, self.r = valid, r
        reads = si[:n, None] | (np.arange(width)[None, :] > 0)
        self.reads = reads & valid
        # above[j, c]: what step j = t+1 holds above the block (row n: the chain's end)
        j = np.arange(n)
        above = np.zeros((n + 1, width), dtype=i64)
        above[:n] = np.where(
            self.reads,
            (g[j + 1] + pg[j + 1] + np.where(so, o, 0))[:, None] + h,
            (g[j] + pg[j])[:, None],
        )
        above[n] = g[n] + pg[n]
        self.above = above
        self.bstep = np.where(tb, bl, NEG)  # B_j above `hold`
        self.regen = regen
        self.o, self.so, self.si, self.s = o, so, si, s

    def node(self, k: int, a: int, room: int) -> tuple[np.ndarray, ...]:
        """`(t, b, cost, held, extra)` of every edge from node `(k, a)` that fits `H = 0`,
        in `row`'s order (`extra`: the run's forwards plus the target's regeneration)."""
        chain, n = self.chain, self.chain.n
        ts, bs, costs, helds = [], [], [], []
        if k + 1 < n:
            for b in range(len(chain.choices[k + 1])):
                cost, held, _ = chain.segment(k, a, k, b)
                ts.append(k)
                bs.append(b)
                costs.append(cost)
                helds.append(held)
        else:
            cost, held, _ = chain.segment(k, a, k, 0)
            ts, bs, costs, helds = [k], [0], [cost], [held]
        self.tried += len(ts)
        t0 = np.array(ts, dtype=np.int64)
        b0 = np.array(bs, dtype=np.int64)
        c0 = np.array(costs, dtype=np.int64)
        h0 = np.array(helds, dtype=np.int64)
        if k + 1 < n:
            t1, b1, c1, h1 = self._run(k, a, room)
            t0, b0 = np.concatenate((t0, t1)), np.concatenate((b0, b1))
            c0, h0 = np.concatenate((c0, c1)), np.concatenate((h0, h1))
        if chain.rule:  # the in-place rule's forbidden edges (`MenuChain.forbidden`)
            banned = [chain.forbidden(k, int(t), int(b)) for t, b in zip(t0, b0, strict=True)]
            c0 = np.where(np.array(banned, dtype=bool), FORBID, c0)
        keep = c0 <= room
        t0, b0, c0, h0 = t0[keep], b0[keep], c0[keep], h0[keep]
        recompute = np.concatenate(([0.0], np.cumsum(self.fwd[k + 1 :])))  # by t - k
        extra = recompute[t0 - k]
        top = t0 + 1 < n
        extra[top] += self.r[t0[top] + 1, b0[top]]
        return t0, b0, c0, h0, extra

    def _run(self, k: int, a: int, room: int) -> tuple[np.ndarray, ...]:
        """The entries with a non-empty run (`t = k+1 .. n-1`): the layer's pass with
        `h = 0` (cached for its next choice), shifted by choice `a`'s held bytes."""
        if self._cached is None or self._cached[0] != (k, room):
            self._cached = ((k, room), self._relative(k, room))
        ts, bb, cost, growing, base = self._cached[1]
        h = self.chain.choices[k][a][1] if k >= 0 else 0
        over = np.flatnonzero(growing + h > room)  # `NEG + h` stays far below any room
        rows = over[0] + 1 if len(over) else len(growing)
        self.tried += rows * self.width
        end = int(np.searchsorted(ts, k + 1 + rows))  # entries by top ascending
        cost = cost[:end]
        cost = np.where(cost > NEG, cost + h, NEG)
        return ts[:end], bb[:end], cost, np.full(end, base + h, dtype=np.int64)

    def _relative(self, k: int, room: int) -> tuple[np.ndarray, ...]:
        """Layer `k`'s entries with `h = 0`, up to the first top whose growing terms pass
        the room: `(t, b, cost, growing per top, base)`."""
        n = self.chain.n
        if k >= 0:
            base = int(self.o[k])
            r_k = int(self.o[k]) if self.so[k] or self.si[k + 1] else 0
        else:
            base = r_k = 0
        ts = np.arange(k + 1, n)
        first = base + int(self.pfirst[k + 1]) if self.pfirst[k + 1] > NEG else NEG
        shift = r_k - int(self.W[k + 1])
        fmax = np.maximum(first, base + np.maximum.accumulate(self.f[k + 1 :]))
        bmax = shift + np.maximum.accumulate(self.b[k + 1 :])
        qs = self.q[k + 1 :].copy()
        qs[0] = NEG  # F'_{k+1} belongs to `first`
        qmax = shift + np.maximum.accumulate(qs)
        growing = np.maximum(fmax, bmax)
        growing = np.where(growing < LOW, NEG, growing)
        over = np.flatnonzero(growing > room)
        if len(over):
            stop = over[0] + 1
            ts, fmax, qmax, growing = ts[:stop], fmax[:stop], qmax[:stop], growing[:stop]
        hold = shift + self.W[ts]  # before the top joins: r_k + w_{k+1} + ... + w_{t-1}
        width = self.width
        top = ts + 1 < n
        j = np.minimum(ts + 1, n - 1)
        valid = np.where(top[:, None], self.valid[j], np.arange(width)[None, :] == 0)
        reads = top[:, None] & self.reads[j]
        above = self.above[ts + 1]
        cost = np.broadcast_to(growing[:, None], (len(ts), width)).copy()
        if first > NEG:
            cost = np.maximum(cost, first + above)
        qok = qmax >= LOW
        cost = np.where(qok[:, None], np.maximum(cost, qmax[:, None] + above), cost)
        # the top step: hold after the block (`u = t+1`: the top's output read) or base
        step = np.where(reads, (hold + self.s[ts] + self.o[ts])[:, None], base)
        bstep = self.bstep[j][:, None]
        regen = self.regen[j]
        stepped = np.maximum(
            np.where(bstep > NEG, step + bstep, NEG), np.where(regen > NEG, step + regen, NEG)
        )
        cost = np.where(top[:, None], np.maximum(cost, stepped), cost)
        cost = np.where(cost < LOW, NEG, cost)
        tt, bb = np.nonzero(valid)
        return ts[tt], bb.astype(np.int64), cost[tt, bb], growing, base
