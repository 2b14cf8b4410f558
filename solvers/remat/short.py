"""The exact search for short chains, in plain Python: where numpy's call overheads dominate.

NOTE (why a second search). On a chain of a few dozen layers a front holds
tens of labels and an edge moves a handful: `labels`' vectorised search
then spends its time on numpy's per-call overheads (a microsecond or two
per call, tens of calls per node), not on labels. This one runs the same
exact Pareto-label search (`labels`' note: a label `(H, V)` at a kept
layer, a front per layer, an edge takes the prefix of a front with `H <=
room - c(k, t)`) on Python lists, with every edge's cost read from
`pychain`'s rows (no numpy model is built), and it prunes with a cheaper
bound (beyond `PLAIN_LAYERS`; below, none):

* **Bound.** The same Lagrangian relaxation as `bounds` at one price `lam`
  (completions keep only the last segment's constraint, dualised; every
  edge on the way must fit with nothing held below it), plus `N`: the best
  completion whose last segment owns no op of positive duration (no
  constraint, no price). `bound(x, H) = max(lam * (room - H) + G[x],
  N[x])`. The price minimising the root bound is found by a few cutting
  planes (the bound is convex and piecewise linear in `lam`, the argmax
  path's slack is a subgradient).
* **Incumbent.** Each price's argmax path is a plan of the relaxation; the
  best one that fits the real constraints (checked exactly, in bytes) is a
  plan whose value every pruned label is below. Without one, targets as in
  `optimum`: the root bound less the largest forward, then the best value
  found, then none.

A label is dropped only when its bound is below a value some plan reaches
(or a target whose failure the caller handles): the answer is exact for
every profile, as `labels`' is.

Two more questions need no labels at all: whether any plan fits and the
space's minimum budget (`reach`, one pass over the edges). The tests check
every piece against enumeration and both searches against each other
(`optimum.solve_short` puts them together).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from operator import itemgetter

from solvers.remat.chain import NEG, ChainModel
from solvers.remat.labels import WORK_PER_CANDIDATE, WORK_PER_LABEL, Found, SearchStats
from solvers.remat.pychain import PyChain
from solvers.remat.reach import reach

# Chains up to this long take these searches. Measured (CPU time, model
# included): on the synthetic chain they beat the vectorised ones 3-10x at
# 16-64 layers and still 1.2-2x at 80-128; on transformer chains of 160 layers
# at 50%, with fronts of 800-950 labels, the vectorised search is 1.8x faster
# (gpt-12: 2.5 s against 4.5 s); resnet50-ops (175 layers): 1.5x at 50%, even at 30%.
SHORT_LAYERS = 64
# Up to this many layers the search runs without a bound: its fronts hold a
# few labels, and pricing each one costs more than the labels it would cut
# (measured on the synthetic chain, search alone: without, 1.1 ms at 32 layers
# and 50%, 0.43 ms at 30%; with, 1.8 and 1.0 ms; at 40 layers 2.0 against 2.8 ms,
# at 48 3.5 against 2.8 ms).
PLAIN_LAYERS = 40
PRICE_EVALUATIONS = 5  # cutting-plane steps for the price (each one O(edges))
PRICES_USED = 3  # the labels are tested with the prices of the lowest root bounds
_held = itemgetter(0)  # a label's H
INF = math.inf


class ShortChain:
    """The chain's numbers as Python lists, for one memory `room` (budget less static).

    `far[x]`: the costs of node index `x`'s far edges whose tops `t = x, x+1,
    ... <= L-2` can fit (a row stops past the last top whose growing terms
    are within the room; `pychain`); `last[x]`: the run to the top, INF
    where it cannot fit.
    """

    def __init__(self, model: PyChain | ChainModel, room: int) -> None:
        if not isinstance(model, PyChain):
            model = PyChain(model.profile)
        self.model = model
        n = self.n = model.n
        self.room = room
        self.near = model.near
        self.r_node = model.r_node
        self.base = model.base
        self.fwd = model.fwd
        self.top_op = model.pa[n - 1]  # F_{L-1}'s own term (NEG: it takes no time)
        far, last = [], []
        for x in range(n):
            row = model.row(x, room)
            far.append(row[: n - 1 - x])
            last.append(row[n - 1 - x] if len(row) >= n - x else INF)
        far.append([])
        last.append(NEG)
        self.far, self.last = far, last
        # Far tops of node index x whose cost fits with nothing held below (relaxation).
        self.tops = [[x + i for i, c in enumerate(row) if c <= room] for x, row in enumerate(far)]


class PriceBound:
    """`bound(x, H) = max(lam * (room - H) + G[x], N[x])` (see the module note), and the
    feasible argmax paths met on the way (incumbents)."""

    def __init__(self, chain: ShortChain, evaluations: int = PRICE_EVALUATIONS) -> None:
        self.chain = chain
        self.incumbent: tuple[float, tuple[int, ...]] | None = None
        room = chain.room
        g, w, self.free, nxt = self.sweep(0.0)
        self._offer(nxt)
        swept = [(g[0], 0.0, g)]  # (root value, price, G) of every price swept
        self.evaluations = 1
        if g[0] > -INF and room - w[0] < 0:  # the relaxation's path needs more than the room
            lo, f_lo, s_lo = 0.0, g[0], room - w[0]
            lam = self._guess()
            hi = None
            while self.evaluations < evaluations:
                g, w, _, nxt = self.sweep(lam)
                self.evaluations += 1
                self._offer(nxt)
                value, slope = lam * room + g[0], room - w[0]
                swept.append((value, lam, g))
                if slope == 0:
                    break
                if slope < 0:
                    lo, f_lo, s_lo = lam, value, slope
                else:
                    hi = (lam, value, slope)
                if hi is None:
                    lam *= 4
                    continue
                h_lam, f_hi, s_hi = hi
                # where the two tangents cross (between lo and hi: the bound is convex)
                cross = (f_hi - f_lo + s_lo * lo - s_hi * h_lam) / (s_lo - s_hi)
                if not lo < cross < h_lam:
                    break
                lam = cross
        # Every price gives a valid bound; the labels are tested with the best few.
        swept.sort(key=lambda item: item[0])
        self.prices = [(lam, g) for _, lam, g in swept[:PRICES_USED]]
        self.root = max(swept[0][0], self.free[0])

    def _guess(self) -> float:
        """A first price: the median forward time per byte a kept layer holds."""
        c = self.chain
        ratios = sorted(f / b for f, b in zip(c.fwd, c.base[1:], strict=True) if b > 0 and f > 0)
        return ratios[len(ratios) // 2] if ratios else 1.0

    def sweep(self, lam: float):
        """G, the argmax path's weight W (held plus last cost: the slope), N, and the argmax."""
        c = self.chain
        n, room = c.n, c.room
        fwd, base, r_node, near, last = c.fwd, c.base, c.r_node, c.near, c.last
        g = [-INF] * (n + 1)
        w = [0] * (n + 1)
        free = [-INF] * (n + 1)
        nxt = [-1] * (n + 1)  # argmax successor of G (-1: the path ends here)
        if c.top_op > NEG:  # the top layer kept: F_{L-1} holds H_{L-1} and its own term
            g[n], w[n] = -lam * c.top_op, c.top_op
        else:
            free[n] = 0.0
        for x in range(n - 1, -1, -1):
            best, weight, fr, arg = -INF, 0, -INF, -1
            cost = last[x]
            if cost <= room:  # a run to the top
                if cost > NEG:
                    best, weight = -lam * cost, cost
                else:
                    fr = 0.0
            if near[x] <= room:  # keep the next layer
                held = r_node[x]
                value = fwd[x] + g[x + 1] - lam * held
                if value > best:
                    best, weight, arg = value, w[x + 1] + held, x + 1
                value = fwd[x] + free[x + 1]
                if value > fr:
                    fr = value
            far, far_t, far_free = -INF, -1, -INF
            for t in c.tops[x]:  # a run x .. t, then keep t + 1
                value = fwd[t + 1] + g[t + 2]
                if value > far:
                    far, far_t = value, t
                value = fwd[t + 1] + free[t + 2]
                if value > far_free:
                    far_free = value
            if far_t >= 0:
                held = base[x]
                value = far - lam * held
                if value > best:
                    best, weight, arg = value, w[far_t + 2] + held, far_t + 2
            g[x], w[x], free[x], nxt[x] = best, weight, max(fr, far_free), arg
        return g, w, free, nxt

    def _offer(self, nxt: list[int]) -> None:
        """Keep the argmax path as the incumbent if it fits the real constraints."""
        c = self.chain
        n, room = c.n, c.room
        x, held, value, kept = 0, 0, 0.0, []
        while True:
            y = nxt[x]
            if y < 0:  # ends here: the run to the top (or the top layer is kept)
                if x < n and held + c.last[x] > room:
                    return
                break
            if y == x + 1:
                cost, add = c.near[x], c.r_node[x]
            else:
                cost, add = c.far[x][y - 2 - x], c.base[x]
            if held + cost > room:
                return
            held += add
            value += c.fwd[y - 1]
            kept.append(y - 1)
            x = y
        if self.incumbent is None or value > self.incumbent[0]:
            self.incumbent = (value, tuple(kept))


def search(
    chain: ShortChain,
    bound: PriceBound | None,
    floor: float,
    *,
    charge: Callable[[float], None] = lambda units: None,
    expired: Callable[[], bool] = lambda: False,
) -> tuple[Found | None, SearchStats]:
    """The best plan among labels whose bound reaches `floor` (see `labels.LabelSearch.run`).

    A label is a tuple `(H, -V of its parent, id)` on arrival (so a sort
    puts a front in order) and its node's forward is added once, when the
    node's front is built: every edge into kept layer `j` saves `fwd_j`.
    """
    n, room = chain.n, chain.room
    fwd, base, r_node, near, last, far = (
        chain.fwd,
        chain.base,
        chain.r_node,
        chain.near,
        chain.last,
        chain.far,
    )
    pruned = bound is not None and floor > -INF
    free = bound.free if bound else []
    # three prices, the best repeated where fewer were swept: the test below is unrolled
    prices = (bound.prices * PRICES_USED)[:PRICES_USED] if pruned else []
    incoming: list[list | None] = [[] for _ in range(n + 1)]
    incoming[0].append((0, -0.0, -1))
    parent: list[int] = []
    node: list[int] = []
    best: tuple[float, int] | None = None
    labels = candidates = widest = 0

    def move(y: int, held: int, moved: list[int], count: int) -> None:
        """Labels `0 .. count-1` of the front along one edge into node index `y`, if
        their bound reaches `floor` (the free bound passes a suffix: V ascends)."""
        dest = incoming[y]
        if not pruned:
            dest.extend(zip(moved[:count], nvs[:count], refs[:count], strict=True))
            return
        f = fwd[y - 1]
        cut = bisect_left(vs, floor - f - free[y], 0, count)
        if cut:
            a, b, c = (floor - f - lam * (room - held) - g[y] for lam, g in prices)
            dest.extend(
                (moved[i], nvs[i], refs[i])
                for i in range(cut)
                if k0[i] >= a and k1[i] >= b and k2[i] >= c
            )
        if cut < count:
            dest.extend(zip(moved[cut:count], nvs[cut:count], refs[cut:count], strict=True))

    for x in range(n + 1):
        arriving = incoming[x]
        incoming[x] = None
        if not arriving:
            continue
        candidates += len(arriving)
        # H ascending; sorting on the int alone is several times faster than on the
        # tuples (a third of the search at 32 layers), and ties in H are met below
        arriving.sort(key=_held)
        f = fwd[x - 1] if x else 0.0
        hs: list[int] = []
        vs: list[float] = []
        first = len(parent)
        top = -INF
        level = -1  # the H of the front's last label
        for h, nv, ref in arriving:  # (the hot loop: a few operations a candidate)
            v = f - nv
            if v > top:
                top = v
                if h == level:  # the same H with more V: it replaces the one before
                    vs[-1] = v
                    parent[-1] = ref
                    continue
                level = h
                hs.append(h)
                vs.append(v)
                parent.append(ref)
        size = len(hs)
        refs = list(range(first, first + size))
        node += [x] * size
        labels += size
        widest = max(widest, size)
        charge(len(arriving) * WORK_PER_CANDIDATE + size * WORK_PER_LABEL)
        if x % 16 == 0 and expired():
            return _found(best, parent, node), SearchStats(labels, candidates, widest, True)
        if x == n:  # the top layer kept: its segment owns nothing
            if best is None or vs[-1] > best[0]:
                best = (vs[-1], refs[-1])
            continue
        count = bisect_right(hs, room - last[x])  # a run to the top
        if count and (best is None or vs[count - 1] > best[0]):
            best = (vs[count - 1], refs[count - 1])
        nvs = [-v for v in vs]
        if pruned:
            k0, k1, k2 = ([v - lam * h for h, v in zip(hs, vs, strict=True)] for lam, _ in prices)
        count = bisect_right(hs, room - near[x])  # keep the next layer
        if count:
            held = r_node[x]
            move(x + 1, held, [h + held for h in hs[:count]], count)
        held = base[x]
        moved = [h + held for h in hs]
        if not pruned:  # every edge takes a prefix of the same labels
            items = list(zip(moved, nvs, refs, strict=True))
            for y, cost in enumerate(far[x], x + 2):  # a run x .. y-2, then keep y-1
                count = bisect_right(hs, room - cost)
                if count:
                    incoming[y] += items[:count]
            continue
        for y, cost in enumerate(far[x], x + 2):  # a run x .. y-2, then keep y-1
            count = bisect_right(hs, room - cost)
            if count:
                move(y, held, moved, count)
    return _found(best, parent, node), SearchStats(labels, candidates, widest, False)


def _found(best, parent, node) -> Found | None:
    if best is None:
        return None
    saved, ref = best
    kept = []
    while ref >= 0:
        x = node[ref]
        if x:
            kept.append(x - 1)
        ref = parent[ref]
    return Found(tuple(sorted(kept)), saved)


def fits(chain: ShortChain, room: int) -> tuple[int, ...] | None:
    """The kept layers of some plan whose peak is within `room` (above static), or None.

    Any `room` (the chain's rows are extended as far as it needs). The end
    of the step (the parameter gradients, `pg_total <= room`) is the caller's.
    """
    return reach(chain.model, room)[0]
