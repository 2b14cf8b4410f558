"""The menu search run backwards: completions `(limit, seconds)` per node, pruned by prefixes.

NOTE (why backwards). At tight budgets the forward labels of `menu_search`
explode: on the random 1,000-layer chain with menus at 30% the search with
the optimum's own seconds as its cap made 4.1 million labels (15 s), and
0.2% of the labels at layer 700 had a completion within the cap
(`experiments/results/remat_dp_menus_labels.md`). The Lagrangian bound of
the rest lay 2.9% below the optimum at the root and kept that gap at every
node of the optimal path up to layer ~810: the rest's cost as a function of
the bytes held is a staircase near the chain's top (where the bytes held
below bind every segment), and a price per byte sees only its convex hull.
Searched from the end, that staircase is exact (labels), and what bounds a
label is the prefix below it, whose Lagrangian bound is tight there: the
same chain and cap made 32-48 thousand labels (by the prices), 0.2-0.5 s.

NOTE (the labels, and every pruning). A label at node `x = (k, a)` is a
completion: a path of edges from `x` to the chain's end, with `seconds` its
edges' `extra` and `limit` the most bytes `H` a plan may hold below `k` for
it to fit (every segment of it satisfies `H + pre + cost <= room`, `pre`
the `held` of its edges before; `OPEN`: none has an op). An edge `e` from
`x` to `w` turns a label `(limit, s)` of `w` into `(min(top_e, limit -
held_e), s + extra_e)` at `x` (`top_e` as `menu_graph` builds it: the
segment fits and the target's least need still fits above it). A plan
within the cap is a root label whose limit is at least 0. A label is
dropped only when no plan within the cap completes with it:

1. Dominance: at one node, a label with no less limit and no more seconds
   fits every prefix the other fits at no more seconds; ties keep one copy.
2. A limit below 0 fits no prefix (every `H >= 0`).
3. Per edge, labels of the target whose `limit - held_e >= top_e` all turn
   into `top_e`: only the first (least seconds) is moved; the front is
   sorted by seconds ascending, limit ascending, so what moves is a range.
4. The prefix bound (`PrefixBound`): a prefix from the root to `x` holding
   `H_x <= limit` adds at least `max over lam of G_x(lam) - lam limit`,
   `G_x(lam)` the least `extra + lam H_x` over paths to `x` (memory
   otherwise ignored; `lam = 0`: `fw`, the least seconds of a path). A
   label whose seconds plus that exceed the cap (plus the search's tie
   slack and a rounding margin) completes no plan within the cap. Per
   edge the `lam = 0` test cuts the range first (seconds ascending).
A node's labels meet a few prices first (the best ones of a sample of its
labels, `SAMPLE`): any set of prices gives a valid bound, so a label those
cut is cut; the rest meet every price. The edges are those of a subgraph
holding every plan within the cap (`menu_graph.restrict`). The tests check
the optimum against the enumeration of every plan and against a label
search with only dominance, and the bound against every fitting prefix.

NOTE (the route: a beam's plan as the cap). The labels grow steeply with
the cap above the optimum (30%: 0.35 s with the optimum's seconds as cap,
2.2 s at 0.03% above it, 11 s at 0.2%, measured before the few-prices test)
and a cap below it finds nothing. So `solve_back` runs the same search as a
beam first (of the labels within `last`, `menu_optimum`'s widest cap, a
node keeps `BEAM`, those whose seconds plus the bound are least, and every
label a plan within `first` may use: a plan it finds within `first` is the
optimum), then, when its plan adds more than `first`, the exact search with
its plan's seconds as the cap, on the same edges: the best plan within that
cap is the optimum (the beam's own plan is within it, so one is found). On
the random 1,000-layer chain with menus the beam's plan was the optimum at
30% and 0.01% above it at 50%.

NOTE (work). The same rates as `menu_search`: `LABEL_WORK` per label moved
along an edge, `EDGE_WORK` per edge tried, `BOUND_WORK` per (edge, price)
of the prefix bound; charged node by node, so a work limit stops it at the
same node on any machine. It has no plan before the root: a search stopped
by a limit returns none (`menu_optimum` then asks for the start).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from solvers.remat import menu_search
from solvers.remat.menu_bound import FINE, FINER, MenuBound
from solvers.remat.menu_graph import BOUND_WORK, OPEN, MenuGraph, restrict
from solvers.remat.menu_search import EDGE_WORK, LABEL_WORK, _in_edges
from solvers.remat.menus import MenuPlan

BEAM = 12  # labels a node keeps in the beam that finds the exact search's cap (NOTE, route)
SAMPLE = 8  # labels whose best prices make the first, cheap test of a node's labels
HALF = OPEN // 2  # a limit at least this is OPEN (less some held bytes)
ROUNDING = 1e-9  # relative margin against float rounding in the priced sums


@dataclass(frozen=True)
class BackRun:
    """A backward search's end: the fastest plan within its cap (None: none, or stopped),
    and whether the limit (`stopped`, the label cap included) or its `work_cap` ended it."""

    plan: MenuPlan | None
    seconds: float = math.inf  # the plan's seconds added (its label's)
    stopped: bool = False
    capped: bool = False


class PrefixBound:
    """`G_x(lam)` of the NOTE (pruning 4) per node index, on a set of prices (0 first)."""

    def __init__(self, edges, prices: np.ndarray, room: int, seconds: float) -> None:
        self.prices = np.concatenate(([0.0], prices[prices > 0]))
        count = len(edges.tables)
        into, ptr, held, extra, src = edges.into, edges.ptr, edges.held, edges.extra, edges.src
        g = np.full((count, len(self.prices)), np.inf)
        g[0] = 0.0
        for w in range(1, count):
            edges = into[ptr[w] : ptr[w + 1]]
            if not len(edges):
                continue
            rows = g[src[edges]]
            rows += np.multiply.outer(held[edges].astype(np.float64), self.prices)
            rows += extra[edges, None]
            g[w] = rows.min(axis=0)
        self.g = g
        # the priced sums reach about the top price times the room, plus every forward
        self.margin = ROUNDING * (1.0 + float(self.prices.max()) * max(room, 0) + seconds)

    def lower(self, x: int, limits: np.ndarray, some: np.ndarray | None = None) -> np.ndarray:
        """A lower bound on the seconds of any prefix reaching `x` with `H <= limits`, on
        every price or on the prices `some` (indices; price 0 must be among them)."""
        open_ = limits >= HALF
        held = np.where(open_, 0, limits).astype(np.float64)
        if some is None:
            priced = self.g[x][None, :] - np.multiply.outer(held, self.prices)
            return np.where(open_, self.g[x][0], priced.max(axis=1))
        g, prices = self.g[x], self.prices
        out = np.full(len(held), g[0])
        for j in some.tolist():
            if j:
                np.maximum(out, g[j] - prices[j] * held, out=out)
        return np.where(open_, g[0], out)  # an open limit: price 0 only

    def best(self, x: int, limits: np.ndarray) -> np.ndarray:
        """The prices (indices, 0 among them) best at some of `limits`."""
        open_ = limits >= HALF
        priced = self.g[x][None, :] - np.multiply.outer(
            np.where(open_, 0, limits).astype(np.float64), self.prices
        )
        return np.array(sorted({0, *priced.argmax(axis=1).tolist()}), dtype=np.int64)


def solve_back(
    graph: MenuGraph,
    last: float,
    first: float = -math.inf,
    *,
    charge: Callable[[float], None] = lambda units: None,
    expired: Callable[[], bool] = lambda: False,
    work_cap: float = math.inf,
    within: tuple[list[tuple], np.ndarray] | None = None,
) -> tuple[BackRun, BackRun | None]:
    """The optimum among plans adding at most `last` seconds (NOTE, route): `(exact, beam)`,
    `exact.plan` proven optimal when set; `beam` the heuristic's run (None: not reached).
    The beam keeps every label of a plan within `first` (a cap the optimum may meet): one
    it finds within `first` is proven, and no exact search follows.
    `within`: edge tables holding every plan within `last` and the prices to use (default:
    `menu_graph.restrict`'s, and `route_prices`)."""
    tables, prices = within or (restrict(graph.tables, graph.fw, last), route_prices(graph.coarse))
    spent = 0.0

    def pay(units: float) -> None:
        nonlocal spent
        spent += units
        charge(units)

    kw = {"charge": pay, "expired": expired}
    beam = run_back(graph, tables, prices, last, beam=BEAM, exact=first, work_cap=work_cap, **kw)
    if beam.plan is None:  # stopped, or no plan within `last` (or none the beam kept)
        return beam, None
    if beam.seconds <= first + 1e-9 * (1.0 + abs(first)):  # every plan within `first` kept
        return beam, beam
    exact = run_back(graph, tables, prices, beam.seconds, work_cap=work_cap - spent, **kw)
    return exact, beam


def route_prices(bound: MenuBound, coarse: int | None = None) -> np.ndarray:
    """The prefix bound's prices: a quarter of the coarse grid (its first `coarse` prices;
    default: all) and the rest's finer ones; without those (a coarse bound), `FINE` and
    `FINER` multiples of its best price at the root (the prefixes' best lies near it)."""
    coarse = len(bound.prices) if coarse is None else coarse
    finer = bound.prices[coarse:]
    if not len(finer):
        best = bound.best_price()
        finer = np.concatenate((best * FINE, best * FINER))
    return np.concatenate((bound.prices[:coarse:4], finer))


def run_back(
    graph: MenuGraph,
    tables: list[tuple],
    prices: np.ndarray,
    cap: float,
    *,
    charge: Callable[[float], None] = lambda units: None,
    expired: Callable[[], bool] = lambda: False,
    work_cap: float = math.inf,
    beam: int | None = None,
    exact: float = -math.inf,
) -> BackRun:
    """The fastest plan adding at most `cap` seconds (plus the tie slack), by labels from
    the chain's end (module NOTE); `plan` None and not stopped: none within the cap.

    With `beam`, a node keeps every label a plan adding at most `exact` seconds may use
    and, of the others within `cap`, the `beam` whose seconds plus the bound are least:
    a plan it returns adding at most `exact` (plus the slack) is the optimum."""
    chain, order = graph.chain, graph.order
    count = len(order)
    spent = 0.0

    def pay(units: float) -> None:
        nonlocal spent
        spent += units
        charge(units)

    ready = _prepared(graph, tables, prices, pay)
    prefix, fw = ready.prefix, ready.prefix.g[:, 0]
    base, into, ptr = ready.base, ready.into, ready.ptr
    held_all, extra_all, src_all, top_all = ready.held, ready.extra, ready.src, ready.top
    slack = 1e-9 * (1.0 + abs(cap)) if cap < math.inf else 0.0
    limit_s = cap + slack + prefix.margin
    lo = np.zeros(len(held_all), dtype=np.int64)
    hi = np.zeros(len(held_all), dtype=np.int64)
    store = _Store()
    for x in range(count - 1, -1, -1):
        if expired() or store.size > menu_search.MAX_LABELS:  # (its NOTE, memory)
            return BackRun(None, stopped=True)
        if spent > work_cap:
            return BackRun(None, capped=True)
        target, top, held, extra, _after, _cost = tables[x]
        if not len(target) or fw[x] == math.inf:
            continue
        lim, sec, parent = _arriving(store, base[x], target, top, held, extra, lo, hi)
        pay(len(lim) * LABEL_WORK + len(target) * EDGE_WORK)
        if not len(lim):
            continue
        keep = lim >= 0
        some = None
        if len(lim) > SAMPLE:  # a few prices first, the best of a sample's (any price bounds)
            some = prefix.best(x, lim[:: len(lim) // SAMPLE])
            keep &= sec + prefix.lower(x, lim, some) <= limit_s
        lim, sec, parent = lim[keep], sec[keep], parent[keep]
        if beam is None:  # every price: no plan through a label adds less
            keep = sec + prefix.lower(x, lim) <= limit_s
            if not keep.all():
                lim, sec, parent = lim[keep], sec[keep], parent[keep]
        if not len(lim):
            continue
        lim, sec, parent = _pareto(lim, sec, parent)
        if beam is not None and len(lim) > beam:  # a heuristic: the labels likeliest to win
            score = sec + prefix.lower(x, lim)
            within = score <= exact + slack + prefix.margin  # all kept: exact below `exact`
            others = np.flatnonzero(~within)
            pick = others[np.lexsort((sec[others], score[others]))[:beam]]
            pick = np.sort(np.concatenate((np.flatnonzero(within), pick)))
            lim, sec, parent = lim[pick], sec[pick], parent[pick]
        first = store.add(lim, sec, parent, x)
        if x == 0:
            break
        # the edges into x: the range of x's front each may move (prunings 2-4)
        edges = into[ptr[x] : ptr[x + 1]]
        if not len(edges):
            continue
        h, t = held_all[edges], top_all[edges]
        start = np.searchsorted(lim, h, side="left")
        whole = np.where(t >= HALF, len(lim), np.searchsorted(lim, t + h, side="left") + 1)
        room_s = limit_s - extra_all[edges] - fw[src_all[edges]]
        cheap = np.searchsorted(sec, room_s, side="right")
        stop = np.minimum(np.minimum(whole, len(lim)), cheap)
        lo[edges] = first + start
        hi[edges] = first + np.maximum(stop, start)
    roots = store.node[: store.size] == 0
    if not roots.any():
        return BackRun(None)
    label = int(np.flatnonzero(roots)[0])  # the root's front: seconds ascending
    return BackRun(_plan(chain, order, store, label), float(store.sec[label]))


class _Ready:
    """What every backward search on one set of edge tables shares: the prefix bound and
    the edges as one numbering (`menu_search._in_edges`), with their source and `top`."""

    def __init__(self, tables: list[tuple], prices: np.ndarray, room: int, seconds: float):
        self.tables = tables
        self.base, self.into, self.ptr, self.held, self.extra = _in_edges(tables)
        sizes = [len(t[0]) for t in tables]
        self.src = np.repeat(np.arange(len(tables)), sizes)
        self.top = np.concatenate([t[1] for t in tables] + [np.zeros(0, dtype=np.int64)])
        self.prefix = PrefixBound(self, prices, room, seconds)


def _prepared(graph: MenuGraph, tables: list[tuple], prices, pay) -> _Ready:
    """The graph's `_Ready` for `tables`, built (and charged) once per set of tables."""
    ready = graph.back
    if ready is None or ready.tables is not tables:
        ready = _Ready(tables, prices, graph.room, math.fsum(graph.chain.fwd))
        graph.back = ready
        pay(len(ready.held) * len(ready.prefix.prices) * BOUND_WORK)
    return ready


def _arriving(store, first_edge: int, target, top, held, extra, lo, hi):
    """The labels node `x`'s edges bring: `(limit, seconds, label each came from)`."""
    final = target < 0
    ends = bool(final.any())
    if ends:
        inner = np.flatnonzero(~final)
        edges = first_edge + inner
        counts = hi[edges] - lo[edges]
    else:  # most nodes: every edge leads to a node (one slice, no fancy indexing)
        counts = (
            hi[first_edge : first_edge + len(target)] - lo[first_edge : first_edge + len(target)]
        )
        inner = np.arange(len(target))
    some = np.flatnonzero(counts)
    if not ends and not len(some):  # nothing arrives (most nodes off the cap's plans)
        return counts[:0], extra[:0], counts[:0]
    inner, counts = inner[some], counts[some]
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    source = np.arange(total) + np.repeat(lo[first_edge + inner] - starts, counts)
    came = store.lim[source]
    cut = np.repeat(top[inner], counts)
    lim = np.where(came >= HALF, cut, np.minimum(cut, came - np.repeat(held[inner], counts)))
    sec = store.sec[source] + np.repeat(extra[inner], counts)
    if not ends:
        return lim, sec, source
    return (
        np.concatenate((top[final], lim)),
        np.concatenate((extra[final], sec)),
        np.concatenate((np.full(int(final.sum()), -1, dtype=np.int64), source)),
    )


def _pareto(lim: np.ndarray, sec: np.ndarray, *rest: np.ndarray) -> tuple:
    """The labels not dominated in (limit up, seconds down), by seconds ascending (ties:
    the larger limit, then the first made), with `rest` (arrays per label) alongside."""
    order = np.lexsort((-lim, sec))
    lim = lim[order]
    keep = np.empty(len(lim), dtype=bool)
    keep[0] = True
    keep[1:] = lim[1:] > np.maximum.accumulate(lim)[:-1]
    order = order[keep]
    return (lim[keep], sec[order], *(part[order] for part in rest))


class _Store:
    """Every node's front in one set of growing arrays: limit, seconds, the label of the
    target each came from (-1: the chain's end) and its node index."""

    def __init__(self) -> None:
        self.size = 0
        self.lim = np.zeros(1024, dtype=np.int64)
        self.sec = np.zeros(1024)
        self.parent = np.zeros(1024, dtype=np.int64)
        self.node = np.zeros(1024, dtype=np.int64)

    def add(self, lim, sec, parent, node: int) -> int:
        """Append a front; returns the index of its first label."""
        first, end = self.size, self.size + len(lim)
        if end > len(self.lim):
            grown = max(end, 2 * len(self.lim))
            for name in ("lim", "sec", "parent", "node"):
                old = getattr(self, name)
                new = np.zeros(grown, dtype=old.dtype)
                new[:first] = old[:first]
                setattr(self, name, new)
        self.lim[first:end], self.sec[first:end] = lim, sec
        self.parent[first:end], self.node[first:end] = parent, node
        self.size = end
        return first


def _plan(chain, order, store: _Store, label: int) -> MenuPlan:
    """The plan of a root label: its nodes, read along the labels it came from."""
    n = chain.n
    actions = ["recompute"] * n
    options: list[str | None] = [None] * n
    seconds = float(store.sec[label])
    label = int(store.parent[label])
    while label >= 0:
        k, a = order[int(store.node[label])]
        actions[k] = "keep"
        options[k] = chain.choices[k][a][0]
        label = int(store.parent[label])
    makespan = chain.profile.t_ideal + seconds
    return MenuPlan(
        tuple(actions), tuple(options), makespan, chain.peak(tuple(actions), tuple(options))
    )
