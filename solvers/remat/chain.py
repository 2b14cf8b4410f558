"""The exact memory of a keep/recompute plan, cut into segments that a DP can chain.

NOTE (the theorem; spec v2, "Memory"). A recompute-only plan is a set of
kept layers `k_1 < ... < k_m`; put a virtual kept layer `-1` (the batch,
in `static_bytes`) below them. A *segment* `(k, t)` is a kept layer `k` and
the recompute run `k+1 .. t` above it (empty when `t = k`); the next kept
layer is `t+1` (or none when `t = L-1`). Segment `(k, t)` *owns* the
forwards `F_{k+1} .. F_{t+1}`, the block of its run and the backward steps
`t+1 .. k+1` (each op belongs to exactly one segment). Then:

1. **What lies below is one number.** While any op owned by `(k, t)` runs,
   the layers below `k` hold exactly `H_k = sum of held_j` over the kept
   `j < k`, where `held_j = s_j + o_j` when layer `j+1` is recomputed (the
   run's block reads `x_{j+1}`) and `r_j = s_j + [saves_output_j or
   saves_input_{j+1}] o_j` otherwise. Proof: a kept `j < k` frees its
   internals at the end of `B_j` and its output at its last reader, `B_j`,
   `B_{j+1}` or the first forward of the block of the run starting at
   `j+1`, which lies below `k` and so runs at a step `<= k`; all of these
   come after every op the segment owns. A recomputed `j < k` freed its
   products by the end of `F_{j+1} <= F_k`; their regenerated copies do not
   exist yet (blocks below `k` run at steps `<= k`). Gradients and scratch
   are per-op terms. Nothing above `t+1` exists during the segment's
   forwards; during its backward steps everything above was freed by its
   last reader, a step `> t+1`.
2. **What the segment adds depends only on `(k, t)` and the profile.**
   With `base = s_k + o_k`, `R(x) = sum_{j<x} r_j`, `p_i = s_i + o_i +
   fwd_work_i` and `bl_j = s_j + [saves_output_j] o_j + g_j + g_{j+1} +
   sum_{i>=j} pg_i + bwd_work_j` (the backward's reads, gradients and
   scratch), the memory above `static + H_k` is:
   - `F_{k+1}`: `base + p_{k+1}`; `F_i`, `i >= k+2`: `base + o_{i-1} + p_i`;
   - in the block (at step `u = t+1` when layer `t+1` saves its input,
     else `u = t`), `F'_{k+1}`: `base + p_{k+1} + U_u`, `F'_m`:
     `R(m-1) - R(k) + s_{m-1} + o_{m-1} + p_m + U_u`, where `U_u` is what
     the step above still holds (`g_{u+1}`, the parameter gradients above
     `u`, and layer `t+1`'s internals and read output when `u = t+1`);
   - `B_j` for `j` in the run: `R(j) - R(k) + bl_j` (the regenerated
     layers below `j` hold exactly what a kept layer holds);
   - `B_{t+1}`: `R(t+1) - R(k) + bl_{t+1}` after the block (`u = t+1`),
     `base + bl_{t+1}` before it (`u = t`); for an empty run, `r_k + bl_{k+1}`.
3. **Instants.** Frees at an instant precede allocations, so the memory at
   an instant is what every op up to the last one starting there
   allocated, minus what every earlier op freed: the memory *inside* the
   op of positive duration starting there. An op of zero duration is never
   a peak candidate (its scratch is freed as it is allocated), but what it
   allocates and keeps counts inside the next op, as the terms above do.
   The end of the step holds only `static + sum(pg)`.

So `peak = static + max(sum(pg), max over segments of H_k + c(k, t))` with
`c(k, t)` the largest term of 2 over the segment's ops of positive
duration, and `H` grows along the chain by `held_k`: the optimum is a
resource-constrained path over kept layers, exact in bytes (no
quantisation). The tests check this decomposition against
`planopt.simulate` on every keep/recompute plan of random v2 chains.

NOTE (size): the theorem above and the per-segment costs it proves are one
argument; split, the proof would sit apart from the code it justifies.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from planopt.limits import MAX_TOTAL_BYTES
from planopt.plan import KEEP, RECOMPUTE, Action
from planopt.profile import Profile
from solvers.remat.rule import FORBID, rule_masks

NEG = -(1 << 62)  # "no op of positive duration here"
_MAX_TOTAL = 1 << 60  # every sum of bytes stays exact in int64
# Chains up to this long get every far edge's cost in one table (`table=` forces it).
TABLE_LAYERS = 512


class SparseMax:
    """Range maximum of a fixed int64 array in O(1) per query (a sparse table).

    Level `p` holds the maximum of `values[i .. i + 2^p - 1]` at column `i`;
    the levels share one `(levels, len)` array (NEG past each level's end),
    so a batch of ranges of any lengths is two fancy-indexed reads.
    """

    def __init__(self, values: np.ndarray) -> None:
        size = len(values)
        levels = max(1, size.bit_length())
        table = np.full((levels, max(size, 1)), NEG, dtype=np.int64)
        table[0, :size] = values
        span = 1
        for p in range(1, levels):
            table[p, : size - span] = np.maximum(
                table[p - 1, : size - span], table[p - 1, span:size]
            )
            span *= 2
        self.table = table
        self.levels = [table[p, : size - (1 << p) + 1] for p in range(levels)]

    def query1(self, lo: int, hi: int) -> int:
        """max(values[lo..hi]) for one range (NEG when empty): the scalar fast path."""
        if lo > hi:
            return NEG
        p = (hi - lo + 1).bit_length() - 1
        table = self.levels[p]
        return max(int(table[lo]), int(table[hi - (1 << p) + 1]))

    def query(self, lo, hi):
        """max(values[lo..hi]) (inclusive; arrays or ints); NEG where lo > hi."""
        lo = np.asarray(lo)
        hi = np.asarray(hi)
        empty = lo > hi
        length = np.where(empty, 1, hi - lo + 1)
        level = np.floor(np.log2(length)).astype(np.int64)
        a = np.where(empty, 0, lo)
        b = np.where(empty, 0, hi - np.left_shift(1, level) + 1)
        out = np.where(empty, NEG, np.maximum(self.table[level, a], self.table[level, b]))
        return out if out.shape else int(out)


class ChainModel:
    """A profile's numbers in the form the segment DP needs (see the module note).

    Node `k` (a kept layer, `-1` the batch) is stored at index `k + 1` in the
    per-node arrays. `far_costs(k, t0, t1)` gives `c(k, t)` for a window of
    run tops; `near_cost[k+1]` is `c(k, k)`; `held` says what a kept layer
    adds to `H`.
    """

    def __init__(self, profile: Profile, *, table: bool | None = None) -> None:
        layers = profile.layers
        n = self.n = len(layers)
        # Every Profile's sizes sum to at most MAX_TOTAL_BYTES (2^53), so every
        # sum the DP forms (at most 4 times that) is exact in int64.
        assert 4 * MAX_TOTAL_BYTES < _MAX_TOTAL
        self.profile = profile
        self.static = profile.static_bytes

        # One pass over the layers (short chains spend their time on such calls).
        sizes = np.array(
            [
                (
                    x.out_bytes,
                    x.saved_bytes,
                    x.fwd_work_bytes,
                    x.bwd_work_bytes,
                    x.input_grad_bytes,
                    x.param_grad_bytes,
                    x.saves_input,
                    x.saves_output,
                    x.fwd > 0,
                    x.bwd > 0,
                )
                for x in layers
            ],
            dtype=np.int64,
        ).reshape(n, 10)
        o, s, fw, bw, _, pg = (sizes[:, i].copy() for i in range(6))
        g = np.zeros(n + 2, dtype=np.int64)
        g[:n] = sizes[:, 4]
        si = np.zeros(n + 1, dtype=bool)
        si[:n] = sizes[:, 6] != 0
        so, tf, tb = (sizes[:, i] != 0 for i in (7, 8, 9))
        self.fwd = np.array([x.fwd for x in layers], dtype=np.float64)

        pg_from = np.zeros(n + 2, dtype=np.int64)  # sum of pg_i for i >= index
        pg_from[:n] = np.cumsum(pg[::-1])[::-1]
        self.pg_total = int(pg_from[0])
        r = s + np.where(so | si[1:], o, 0)
        p = s + o + fw
        bl = s + np.where(so, o, 0) + g[1 : n + 1] + g[:n] + pg_from[:n] + bw
        big_r = np.zeros(n + 1, dtype=np.int64)
        big_r[1:] = np.cumsum(r)

        # Per-node numbers (index k + 1; node -1 is the batch: nothing held).
        self.base = np.concatenate(([0], s + o))  # held_k when k+1 is recomputed
        self.r_node = np.concatenate(([0], r))  # held_k when k+1 is kept
        self.r_below = np.concatenate(([0], big_r[:n]))  # R(k)

        # Per-op terms, NEG where the op takes no time (never a peak candidate).
        self.kb = np.where(tb, big_r[:n] + bl, NEG)  # B_j in a run, plus R(k) removed
        self.bl = np.where(tb, bl, NEG)
        kq = np.full(n, NEG, dtype=np.int64)
        kq[1:] = big_r[: n - 1] + s[:-1] + o[:-1] + p[1:]
        self.kq = np.where(tf, kq, NEG)  # F'_m, m > first of run
        kf = np.full(n, NEG, dtype=np.int64)
        kf[1:] = o[:-1] + p[1:]
        self.kf = np.where(tf, kf, NEG)  # F_i, i >= k+2
        self.pa = np.where(tf, p, NEG)  # F_{k+1} and F'_{k+1}
        tops = np.arange(n)
        up = (tops + 1 < n) & si[1:]  # the block runs at t+1
        nxt = np.minimum(tops + 1, n - 1)
        self.above = np.where(  # U_u, per run top t
            up,
            s[nxt] + np.where(so[nxt], o[nxt], 0) + g[tops + 2] + pg_from[tops + 2],
            g[tops + 1] + pg_from[tops + 1],
        )
        has_next = tops + 1 < n
        self.top_after = np.where(has_next & up, self.kb[nxt], NEG)  # B_{t+1}, minus R(k)
        self.top_before = np.where(has_next & ~up, self.bl[nxt], NEG)  # B_{t+1}, plus base
        # The in-place rule: far edges it forbids cost FORBID (`solvers.remat.rule`).
        masks = rule_masks(profile)
        self._no_start = None if masks is None else np.array(masks[0], dtype=bool)
        self._no_top = None if masks is None else np.array(masks[1], dtype=bool)
        self._table = None
        if table if table is not None else n <= TABLE_LAYERS:
            self._table = self._cost_table()
        self.near_cost = self._near_costs()
        # c(k, L-1): the run to the top; one column of the table where there is one
        self.last_cost = (
            self._table[:, n - 1].copy() if self._table is not None else self.costs_at_top(n - 1)
        )

    # Range maxima of the per-op terms, built on first use (a short chain reads
    # every cost from its table and never needs them).
    @cached_property
    def _kb(self) -> SparseMax:
        return SparseMax(self.kb)

    @cached_property
    def _kq(self) -> SparseMax:
        return SparseMax(self.kq)

    @cached_property
    def _kf(self) -> SparseMax:
        return SparseMax(self.kf)

    # -- segment costs -------------------------------------------------------

    def held(self, k: int, t: int) -> int:
        """What kept layer `k` adds to `H` when its run ends at `t`."""
        return int(self.r_node[k + 1] if t == k else self.base[k + 1])

    def _near_costs(self) -> np.ndarray:
        """`c(k, k)` for every node (NEG for `k = L-1`: it owns nothing)."""
        n = self.n
        out = np.full(n + 1, NEG, dtype=np.int64)
        a = np.arange(n)  # k + 1 for k = -1 .. n-2
        fwd = np.where(self.pa > NEG, self.base[:n] + self.pa, NEG)
        bwd = np.where(self.bl > NEG, self.r_node[:n] + self.bl, NEG)
        out[a] = np.maximum(fwd, bwd)
        return out

    def _cost_table(self) -> np.ndarray:
        """`c(k, t)` of every far edge at once (row `k + 1`, column `t`; NEG elsewhere).

        The same terms as `_window_costs`, as running maxima along each row of
        an `(L+1) x L` matrix: a few dozen numpy calls in all instead of a few
        per window, which is what short chains spend their time on.
        """
        n = self.n
        rows = np.arange(n + 1)[:, None]
        cols = np.arange(n)[None, :]
        far = cols >= rows  # t >= k + 1
        x = np.minimum(np.arange(n + 1), n - 1)
        base = self.base[:, None]
        rk = self.r_below[:, None]
        pa = np.where(self.pa[x] > NEG, self.base + self.pa[x], NEG)[:, None]
        ext = np.full(n, NEG, dtype=np.int64)
        ext[: n - 1] = self.kf[1:]  # F_{t+1}
        kf = np.maximum.accumulate(np.where(far, ext[None, :], NEG), axis=1)
        fwd = np.maximum(pa, np.where(kf > NEG, kf + base, NEG))
        kb = np.maximum.accumulate(np.where(far, self.kb[None, :], NEG), axis=1)
        bwd = np.where(kb > NEG, kb - rk, NEG)
        kq = np.maximum.accumulate(np.where(cols >= rows + 1, self.kq[None, :], NEG), axis=1)
        inner = np.maximum(pa, np.where(kq > NEG, kq - rk, NEG))
        block = np.where(inner > NEG, inner + self.above[None, :], NEG)
        after, before = self.top_after[None, :], self.top_before[None, :]
        top = np.maximum(
            np.where(after > NEG, after - rk, NEG), np.where(before > NEG, before + base, NEG)
        )
        costs = np.maximum(np.maximum(fwd, bwd), np.maximum(block, top))
        if self._no_start is not None:
            banned = self._no_start[:, None] | self._no_top[None, :]
            costs = np.where(banned, FORBID, costs)
        return np.where(far, costs, NEG)

    def _forbid(self, a, ts, costs: np.ndarray) -> np.ndarray:
        """`costs` of far edges from nodes `a` (= k + 1) to tops `ts`, FORBID where the
        in-place rule forbids them."""
        if self._no_start is None:
            return costs
        return np.where(self._no_start[a] | self._no_top[ts], FORBID, costs)

    @property
    def cost_table(self) -> np.ndarray | None:
        """`c(k, t)` of every far edge (row `k + 1`, column `t`; NEG elsewhere), if tabled."""
        return self._table

    @property
    def tabled(self) -> bool:
        """Whether every far edge's cost is in one table (short chains)."""
        return self._table is not None

    def far_costs(self, k: int, t0: int, t1: int) -> np.ndarray:
        """`c(k, t)` for run tops `t = t0 .. t1` (`k+1 <= t0 <= t1 <= L-1`)."""
        if self._table is not None:
            return self._table[k + 1, t0 : t1 + 1]
        return self._window_costs(k, t0, t1)

    def _window_costs(self, k: int, t0: int, t1: int) -> np.ndarray:
        n = self.n
        a = k + 1
        base = int(self.base[a])
        rk = int(self.r_below[a])
        pa = base + int(self.pa[a]) if self.pa[a] > NEG else NEG
        # Running maxima from the run's first layer, carried into the window.
        # Forwards F_{k+2} .. F_{t+1} (F_{t+1} missing for the chain's top):
        ext = np.full(t1 - t0 + 1, NEG, dtype=np.int64)
        hi = min(t1 + 1, n - 1)
        if hi >= t0 + 1:
            ext[: hi - t0] = self.kf[t0 + 1 : hi + 1]
        kf = np.maximum.accumulate(np.maximum(ext, self._kf.query1(a + 1, t0)))
        fwd = np.maximum(pa, np.where(kf > NEG, kf + base, NEG))
        # Backwards B_{k+1} .. B_t of the run:
        kb = np.maximum.accumulate(np.maximum(self.kb[t0 : t1 + 1], self._kb.query1(a, t0 - 1)))
        bwd = np.where(kb > NEG, kb - rk, NEG)
        # The block's forwards after its first, F'_{k+2} .. F'_t:
        q = self.kq[t0 : t1 + 1].copy()
        if t0 == a:
            q[0] = NEG
        kq = np.maximum.accumulate(np.maximum(q, self._kq.query1(a + 1, t0 - 1)))
        inner = np.maximum(pa, np.where(kq > NEG, kq - rk, NEG))
        block = np.where(inner > NEG, inner + self.above[t0 : t1 + 1], NEG)
        # B_{t+1}, after or before the block:
        after = self.top_after[t0 : t1 + 1]
        before = self.top_before[t0 : t1 + 1]
        top = np.maximum(
            np.where(after > NEG, after - rk, NEG), np.where(before > NEG, before + base, NEG)
        )
        costs = np.maximum(np.maximum(fwd, bwd), np.maximum(block, top))
        return self._forbid(a, np.arange(t0, t1 + 1), costs)

    def costs_at_top(self, t: int) -> np.ndarray:
        """`c(k, t)` for every node `k < t` at one run top `t` (index `k + 1`; NEG elsewhere)."""
        n = self.n
        out = np.full(n + 1, NEG, dtype=np.int64)
        if t < 0:
            return out
        ks = np.arange(-1, t)
        a = ks + 1
        base = self.base[a]
        rk = self.r_below[a]
        pa = np.where(self.pa[a] > NEG, base + self.pa[a], NEG)
        kf = self._kf.query(a + 1, np.full(len(a), min(t + 1, n - 1)))
        fwd = np.maximum(pa, np.where(kf > NEG, kf + base, NEG))
        kb = self._kb.query(a, np.full(len(a), t))
        bwd = np.where(kb > NEG, kb - rk, NEG)
        kq = self._kq.query(a + 1, np.full(len(a), t))
        inner = np.maximum(pa, np.where(kq > NEG, kq - rk, NEG))
        block = np.where(inner > NEG, inner + self.above[t], NEG)
        after, before = int(self.top_after[t]), int(self.top_before[t])
        top = np.maximum(
            np.where(after > NEG, after - rk, NEG), np.where(before > NEG, before + base, NEG)
        )
        out[a] = self._forbid(a, t, np.maximum(np.maximum(fwd, bwd), np.maximum(block, top)))
        return out

    def last_feasible_top(self, room: int) -> np.ndarray:
        """Per node, the highest run top `t` whose cost can be within `room` (at `H = 0`).

        The forwards' and the run's backwards' terms of `c(k, t)` only grow
        with `t`, so past the first top where they exceed `room` no top fits:
        every feasible far edge of node `k` has its top in `[k+1, result]`
        (`k` itself when there is none). Found by bisection, every node at once.
        """
        n = self.n
        ks = np.arange(-1, n)
        a = ks + 1
        lo = a.copy()  # candidate tops; a == n means no far edge
        hi = np.full(n + 1, n - 1)
        valid = a <= n - 1
        ok = np.zeros(n + 1, dtype=bool)
        ok[valid] = self._envelope(ks[valid], a[valid]) <= room
        best = np.where(ok, a, ks)
        lo = np.where(ok, a + 1, hi + 1)
        while True:
            active = lo <= hi
            if not active.any():
                return best
            mid = (lo + hi) // 2
            fits = np.zeros(n + 1, dtype=bool)
            fits[active] = self._envelope(ks[active], mid[active]) <= room
            best = np.where(active & fits, mid, best)
            lo = np.where(active & fits, mid + 1, lo)
            hi = np.where(active & ~fits, mid - 1, hi)

    def _envelope(self, ks: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """max(forwards' term, run backwards' term) of `c(k, t)`: a nondecreasing lower bound."""
        n = self.n
        a = ks + 1
        base = self.base[a]
        pa = np.where(self.pa[a] > NEG, base + self.pa[a], NEG)
        kf = self._kf.query(a + 1, np.minimum(ts + 1, n - 1))
        fwd = np.maximum(pa, np.where(kf > NEG, kf + base, NEG))
        kb = self._kb.query(a, ts)
        return np.maximum(fwd, np.where(kb > NEG, kb - self.r_below[a], NEG))

    # -- plans -----------------------------------------------------------------

    def segments(self, kept: list[int]) -> list[tuple[int, int]]:
        return plan_segments(self.n, kept)

    def cost(self, k: int, t: int) -> int:
        return int(self.near_cost[k + 1]) if t == k else int(self.far_costs(k, t, t)[0])

    def peak(self, kept: list[int]) -> int:
        return plan_peak(self, kept)

    def actions(self, kept) -> list[Action]:
        kept = set(kept)
        return [KEEP if i in kept else RECOMPUTE for i in range(self.n)]


# -- a plan on either model (`ChainModel`, `solvers.remat.pychain.PyChain`) ------------


def plan_segments(n: int, kept) -> list[tuple[int, int]]:
    """A plan's segments `(k, t)`, bottom to top, from its kept layers."""
    nodes = [-1, *sorted(kept)]
    tops = [*nodes[1:], n]
    return [(k, nxt - 1) for k, nxt in zip(nodes, tops, strict=True)]


def plan_peak(model, kept) -> int:
    """A plan's peak from the decomposition (equals the simulator's): `model` is
    either chain model, read through its `n`, `cost`, `held`, `pg_total`, `static`."""
    held = 0
    best = model.pg_total
    for k, t in plan_segments(model.n, kept):
        c = model.cost(k, t)
        if c > NEG:
            best = max(best, held + c)
        if k >= 0:
            held += model.held(k, t)
    return model.static + best
