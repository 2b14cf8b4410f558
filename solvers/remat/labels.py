"""The exact search: Pareto labels over kept layers, pruned by the completion bound.

NOTE (why labels, and why exact). The recompute-only problem is weakly
NP-hard: give the top layer a backward whose scratch leaves room `W` for
what is held below it, and choosing which layers to keep is a 0/1 knapsack
(weights `held`, values `fwd`). No exact DP is polynomial in `L` alone
unless P = NP; Rotor's is pseudo-polynomial in memory units (and rounds
sizes to them). Here a *label* at kept layer `k` is a path to it: `(H,
V)`, the bytes it holds below `k` and the forward time its kept layers
save. A label dominates another at the same layer when it holds no more and
saves no less, since every later constraint reads `H` only through `H +
c(k, t) <= cap`; so each layer keeps its Pareto front, exact in bytes, and
the best label at the top is the optimum. A label is dropped only when
`V + bound(k, H)` (see `bounds`) is below the target, a value some plan is
known to reach or a claim the caller checks: such a label cannot lead to
anything better. Nothing else is dropped, so the answer is exact for every
profile; the bound only decides how many labels are looked at.

Every far edge of a node shares its `held`, and its cost `c(k, t)` only
matters through `H <= cap - c(k, t)`: each edge takes a prefix of the
node's front (sorted by `H`), found by `searchsorted`, a window of tops at a
time, until the bound says no top further up can reach the target.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from solvers.remat.bounds import CompletionBound
from solvers.remat.chain import ChainModel

FIRST_WINDOW = 16  # tops per window at first; doubled while the scan goes on
MAX_WINDOW = 1024
# Work units (about a second of one core each, see planopt.work) charged per
# label on a front, per label generated along an edge, and per window of tops
# costed (numpy's call overheads); fitted to the synthetic chains from 1,000
# to 10,000 layers on the reference machine (2 cores, loaded).
WORK_PER_LABEL = 3e-7
WORK_PER_CANDIDATE = 3e-7
WORK_PER_WINDOW = 3e-5
# Per label whose bound reaches the floor (`CompletionBound.reaches`): the survivors
# of its first, cheap test pay for every price and the grid. Fitted (issue 25) on
# three chains at 40% (random 300, resnet50-ops, GPT-24), where the survivors per
# candidate ranged 12%-73% and CPU per count without this term 0.27-0.70 s.
WORK_PER_SURVIVOR = 6e-7


@dataclass(frozen=True)
class Found:
    """The best plan a search reached: its kept layers and the forward time they save."""

    kept: tuple[int, ...]
    saved: float


@dataclass(frozen=True)
class SearchStats:
    labels: int  # labels kept on the fronts
    candidates: int  # labels generated along edges (before Pareto)
    widest: int  # the largest front
    stopped: bool  # the work or time limit ended it
    capped: bool = False  # it spent the `work_cap` it was given before the top


def _pareto(h, v, pk, pi):
    """The front: `H` ascending, `V` strictly ascending (the rest is dominated)."""
    order = np.lexsort((-v, h))
    h, v, pk, pi = h[order], v[order], pk[order], pi[order]
    keep = np.ones(len(v), dtype=bool)
    keep[1:] = v[1:] > np.maximum.accumulate(v)[:-1]
    return h[keep], v[keep], pk[keep], pi[keep]


class LabelSearch:
    """One exact search at a memory `room` (budget minus static bytes)."""

    def __init__(self, model: ChainModel, room: int, bound: CompletionBound | None = None) -> None:
        self.model = model
        self.room = room
        self.bound = bound or CompletionBound(model, room)

    def run(
        self,
        target: float,
        *,
        tol: float,
        charge: Callable[[float], None] = lambda units: None,
        expired: Callable[[], bool] = lambda: False,
        work_cap: float = np.inf,
    ) -> tuple[Found | None, SearchStats]:
        """The best plan among labels whose bound reaches `target - tol`.

        If it saves at least `target - tol`, it is optimal; if it saves less
        (or there is none), every plan saving `target - tol` or more was
        ruled out, and the best found is still a valid plan. A search that
        has charged `work_cap` units before the top returns None, `capped`
        (the caller's choice to try a better bound first: deterministic).
        """
        spent = 0.0
        outer = charge

        def charge(units: float) -> None:
            nonlocal spent
            spent += units
            outer(units)

        model, bound, room = self.model, self.bound, self.room
        n = model.n
        fwd = model.fwd
        floor = target - tol
        chunks: list[list[tuple]] = [[] for _ in range(n + 1)]
        back: list[tuple[np.ndarray, np.ndarray] | None] = [None] * (n + 1)
        finals: list[tuple[np.ndarray, np.ndarray, int]] = []
        labels = candidates = widest = 0
        for x in range(n + 1):  # node k = x - 1
            k = x - 1
            if x == 0:
                h = np.zeros(1, dtype=np.int64)
                v = np.zeros(1)
                pk = pi = np.zeros(1, dtype=np.int64)
            else:
                if not chunks[x]:
                    continue
                h, v, pk, pi = (np.concatenate(c) for c in zip(*chunks[x], strict=True))
                chunks[x] = []
                h, v, pk, pi = _pareto(h, v, pk, pi)
            back[x] = (pk, pi)
            size = len(h)
            labels += size
            widest = max(widest, size)
            charge(size * WORK_PER_LABEL + WORK_PER_WINDOW)
            if x % 16 == 0 and expired():
                return self._best(finals, back), SearchStats(
                    labels, candidates, widest, stopped=True
                )
            if spent > work_cap:
                return None, SearchStats(labels, candidates, widest, stopped=False, capped=True)
            index = np.arange(size)
            # keep the next layer (an empty run)
            theta = room - int(model.near_cost[x])
            count = int(np.searchsorted(h, theta, side="right"))
            if k == n - 1:
                finals.append((v, index, x))
                continue
            if count:
                pushed = self._push(
                    chunks,
                    x,
                    k + 1,
                    h[:count] + int(model.r_node[x]),
                    v[:count],
                    index[:count],
                    floor,
                )
                candidates += pushed
                charge(pushed * WORK_PER_SURVIVOR)
            # a run k+1 .. t, then keep t+1 (or the run reaches the top)
            top = int(bound.tmax[x])
            if top >= n - 1:
                theta = room - int(model.last_cost[x])
                count = int(np.searchsorted(h, theta, side="right"))
                if count:
                    finals.append((v[:count], index[:count], x))
            held = h + int(model.base[x])
            # Short chains have every cost in a table: one window, no stopping test.
            t0, width = k + 1, (n if model.tabled else FIRST_WINDOW)
            last = min(top, n - 2)
            while t0 <= last:
                if not model.tabled and bound.window(k, t0, h, v) < floor:
                    break
                t1 = min(t0 + width - 1, last)
                charge(WORK_PER_WINDOW)
                costs = model.far_costs(k, t0, t1)
                counts = np.searchsorted(h, room - costs, side="right")
                total = int(counts.sum())
                charge(total * WORK_PER_CANDIDATE)
                if total:
                    tops = np.repeat(np.arange(t0, t1 + 1), counts)
                    starts = np.cumsum(counts) - counts
                    which = np.arange(total) - np.repeat(starts, counts)
                    hh = held[which]
                    vv = v[which] + fwd[tops + 1]
                    ok = bound.reaches(tops + 2, hh, vv, floor)
                    survivors = int(ok.sum())
                    candidates += survivors
                    charge(survivors * WORK_PER_SURVIVOR)
                    tops, hh, vv, which = tops[ok], hh[ok], vv[ok], which[ok]
                    if len(tops):
                        cuts = np.flatnonzero(np.diff(tops)) + 1
                        for seg in np.split(np.arange(len(tops)), cuts):
                            j = int(tops[seg[0]]) + 1
                            chunks[j + 1].append(
                                (hh[seg], vv[seg], np.full(len(seg), x), which[seg])
                            )
                t0, width = t1 + 1, min(2 * width, MAX_WINDOW)
        return self._best(finals, back), SearchStats(labels, candidates, widest, stopped=False)

    def _push(self, chunks, x, j, h, v, index, floor) -> int:
        """Labels of node index `x` moved to kept layer `j`, if their bound reaches `floor`."""
        v = v + self.model.fwd[j]
        ok = self.bound.reaches(j + 1, h, v, floor)
        if ok.any():
            chunks[j + 1].append((h[ok], v[ok], np.full(int(ok.sum()), x), index[ok]))
        return int(ok.sum())

    def _best(self, finals, back) -> Found | None:
        if not finals:
            return None
        best = None
        for v, index, x in finals:
            i = int(np.argmax(v))
            if best is None or v[i] > best[0]:
                best = (float(v[i]), x, int(index[i]))
        saved, x, i = best
        kept = []
        while x > 0:
            kept.append(x - 1)
            pk, pi = back[x]
            x, i = int(pk[i]), int(pi[i])
        return Found(tuple(sorted(kept)), saved)
