"""The smallest peak of any keep/recompute plan: the recompute-only space's minimum budget.

NOTE (the search). The same segments as the value DP (`chain`); a label at
kept layer `k` is `(H, P)`: the bytes held below `k` and the largest
memory its segments reached so far. One label dominates another when both
are no larger, so each layer keeps a Pareto front sorted by `H` ascending
and `P` descending; an edge `(k, t)` turns `(H, P)` into `(H + held,
max(P, H + c(k, t)))`. A search under a ceiling `U` drops a label when `P
>= U`, or when some op still ahead is sure to exceed `U` (every op of every
segment above `k` holds at least `H` plus its own layer's terms: `H +
ahead[k]`): what is left finds the smallest peak below `U` exactly, or
proves there is none. Ceilings start at the largest single op (a bound no
plan beats) and grow geometrically up to keep-all's peak (a plan every
chain has), so the last search is never wasted by much.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from solvers.remat.chain import NEG, ChainModel
from solvers.remat.labels import FIRST_WINDOW, MAX_WINDOW, WORK_PER_LABEL, WORK_PER_WINDOW
from solvers.remat.pychain import PyChain
from solvers.remat.reach import min_peak_short
from solvers.remat.short import SHORT_LAYERS


@dataclass(frozen=True)
class MinPeak:
    """The smallest peak (bytes, static included), a plan reaching it, and the searches run.

    `kept` is None only when `proven` is False (the limit came first);
    `lower` is then the best proven lower bound.
    """

    peak: int | None
    kept: tuple[int, ...] | None
    proven: bool
    lower: int
    searches: int


def _ahead(model: ChainModel) -> np.ndarray:
    """Per node index `k+1`: the largest own-layer term of any op above kept layer `k`."""
    n = model.n
    per_op = np.maximum(np.maximum(model.kf, model.bl), NEG)  # F_i (i >= k+2), B_j (j >= k+1)
    out = np.full(n + 1, NEG, dtype=np.int64)
    suffix = np.maximum.accumulate(per_op[::-1])[::-1]  # max over index >= i
    for x in range(n):  # node k = x - 1 owns F_{k+1} = F_x with its base
        later = int(suffix[x + 1]) if x + 1 < n else NEG
        out[x] = max(int(model.pa[x]), int(model.bl[x]), later)
    return out


def min_peak(
    model: ChainModel | PyChain,
    *,
    charge: Callable[[float], None] = lambda units: None,
    expired: Callable[[], bool] = lambda: False,
    above: int | None = None,
) -> MinPeak:
    """The smallest peak over every keep/recompute plan of the chain (see the module note).

    `above` (bytes above static) is a peak no plan reaches when the caller
    knows one (a budget proven infeasible): the ceilings start past it.
    """
    floor = max(model.pg_total, 0, -1 if above is None else above + 1)
    if isinstance(model, PyChain) or (model.n <= SHORT_LAYERS and model.tabled):
        # plain Python (see `short`); every op holds at least its own layer's terms
        own = (
            max(model.pa + model.bl + model.kf) if isinstance(model, PyChain) else _ahead(model)[0]
        )
        peak, kept = min_peak_short(model, max(floor, int(own)), charge)
        return MinPeak(model.static + peak, kept, True, model.static + peak, 1)
    ahead = _ahead(model)
    lower = max(floor, int(ahead[0]))
    keep_all = model.peak(list(range(model.n))) - model.static
    step = max(1, int(model.base.max(initial=0)))
    ceiling = lower + 1
    searches = 0
    while True:
        searches += 1
        ceiling = min(ceiling, keep_all + 1)
        found = _search(model, ceiling, ahead, charge, expired)
        if found is None:  # stopped by the limit
            return MinPeak(None, None, False, model.static + lower, searches)
        peak, kept = found
        if peak is not None:
            return MinPeak(model.static + peak, kept, True, model.static + peak, searches)
        lower = ceiling  # no plan peaks below the ceiling
        ceiling = lower + step
        step *= 2


def _search(model: ChainModel, ceiling: int, ahead, charge, expired):
    """(smallest peak below `ceiling` or None, its kept layers); None if stopped."""
    n = model.n
    tops = model.last_feasible_top(ceiling - 1)
    fronts: list[list[tuple]] = [[] for _ in range(n + 1)]
    back: list[tuple | None] = [None] * (n + 1)
    best: tuple[int, int, int] | None = None  # (peak, node index, label)
    for x in range(n + 1):
        k = x - 1
        if x == 0:
            h = np.zeros(1, dtype=np.int64)
            p = np.zeros(1, dtype=np.int64)
            pk = pi = np.zeros(1, dtype=np.int64)
        else:
            if not fronts[x]:
                continue
            h, p, pk, pi = (np.concatenate(c) for c in zip(*fronts[x], strict=True))
            fronts[x] = []
            order = np.lexsort((p, h))
            h, p, pk, pi = h[order], p[order], pk[order], pi[order]
            keep = np.ones(len(h), dtype=bool)
            keep[1:] = p[1:] < np.minimum.accumulate(p)[:-1]
            h, p, pk, pi = h[keep], p[keep], pk[keep], pi[keep]
        back[x] = (pk, pi)
        charge(len(h) * WORK_PER_LABEL + WORK_PER_WINDOW)
        if x % 16 == 0 and expired():
            return None
        index = np.arange(len(h))
        if k == n - 1:
            _final(np.maximum(p, model.pg_total), index, x, ceiling, best_ref := [best])
            best = best_ref[0]
            continue
        # keep the next layer
        c = int(model.near_cost[x])
        _push(fronts, x, k + 1, h + int(model.r_node[x]), _grow(p, h, c), index, ceiling, ahead)
        # a run, then a kept layer or the top
        hi = int(tops[x])
        if hi >= n - 1:
            c = int(model.last_cost[x])
            best_ref = [best]
            _final(np.maximum(_grow(p, h, c), model.pg_total), index, x, ceiling, best_ref)
            best = best_ref[0]
        held = h + int(model.base[x])
        t0, width = k + 1, FIRST_WINDOW
        last = min(hi, n - 2)
        while t0 <= last:
            t1 = min(t0 + width - 1, last)
            charge(WORK_PER_WINDOW)
            costs = model.far_costs(k, t0, t1)
            for off, cost in enumerate(costs.tolist()):
                t = t0 + off
                _push(fronts, x, t + 1, held, _grow(p, h, cost), index, ceiling, ahead)
            if int(h[0]) + int(costs.min()) >= ceiling and _rising(model, k, t1, h, ceiling):
                break
            t0, width = t1 + 1, min(2 * width, MAX_WINDOW)
    if best is None:
        return (None, None)
    peak, x, i = best
    kept = []
    while x > 0:
        kept.append(x - 1)
        pk, pi = back[x]
        x, i = int(pk[i]), int(pi[i])
    return (peak, tuple(sorted(kept)))


def _grow(p: np.ndarray, h: np.ndarray, cost: int) -> np.ndarray:
    return p if cost <= NEG else np.maximum(p, h + cost)


def _push(fronts, x, j, h, p, index, ceiling, ahead) -> None:
    ok = (p < ceiling) & (h + int(ahead[j + 1]) < ceiling)
    if ok.any():
        fronts[j + 1].append((h[ok], p[ok], np.full(int(ok.sum()), x), index[ok]))


def _final(p, index, x, ceiling, best_ref) -> None:
    i = int(np.argmin(p))
    value = int(p[i])
    if value < ceiling and (best_ref[0] is None or value < best_ref[0][0]):
        best_ref[0] = (value, x, int(index[i]))


def _rising(model: ChainModel, k: int, t: int, h: np.ndarray, ceiling: int) -> bool:
    """Whether every top above `t` is out of reach: the growing terms already exceed it."""
    env = model._envelope(np.array([k]), np.array([t]))[0]
    return int(h[0]) + int(env) >= ceiling
