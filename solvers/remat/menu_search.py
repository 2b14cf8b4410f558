"""The label search of remat-dp over menus: the fastest keep/option/recompute plan that fits.

`solvers.remat.menus` states the theorem (each segment's cost and what a
kept layer holds below the segments above it); this module walks its
resource-constrained path exactly: labels `(H, seconds)` per node `(k, a)`,
Pareto-pruned, fronts kept as numpy arrays (`menu_edges` builds the edges).

NOTE (every pruning, and why none loses the optimum). A label is dropped
only when no completion of it can fit, or none can be faster than a plan
already known (the incumbent: the whole-layer optimum, or a completed
label), so the optimum's own labels all survive:

1. Dominance: at one node, a label holding no more bytes and no more
   seconds than another reaches every completion the other reaches (the
   segment constraints are `H + cost <= room`, monotone in `H`) at no more
   seconds; ties keep one copy.
2. Edges that do not fit `H = 0` are never built, and a row of tops stops
   at the first top whose growing terms pass the room (every longer run
   holds them too); every real label has `H >= 0`.
3. H-side, per edge (a prefix of the front, H ascending): the segment must
   fit, `H + cost <= room`, and so must the least peak any completion from
   the target has above what it holds (`need`, a backward pass over the
   edges: the minimum over completions of their largest `H`-relative term).
4. Seconds-side, per edge (a suffix of the front, seconds strictly
   descending): the label's seconds, the edge's and `rest` (the least
   seconds any completion of the target adds, memory ignored) exceed the
   incumbent's seconds plus a relative tie slack of 1e-9.
5. The Lagrangian bound (`menu_bound`'s NOTE has the proof): a front's
   label whose seconds plus the bound at its `H` exceed the incumbent's
   (plus the slack and the bound's rounding margin).
6. The same bound per edge, before its labels are made: the labels of the
   edge's suffix (pruning 4) all hold at least `H` of its first label plus
   the edge's `held` at the target, and the bound grows with `H`, so the
   bound there (less its margin) replaces `rest` in pruning 4's test; the
   suffix can only shrink, and it is redone `REFINE` times.
Labels the fronts drop are dropped with their dominated ones, so each
front stays Pareto-minimal and a node's front is final when it is expanded
(edges lead to later nodes only). The tests check the optimum against
enumeration and against a label search with only dominance on 30-60-layer
chains, and the bound against every fitting plan's rest.

NOTE (work). Calibrated on random 200- and 1,000-layer chains with menus
(CPU seconds, the shared 2-core box): about 1e-7 s per segment cost of the
edge pass, 1e-7 s per label made, 1e-6 s per edge tried from an expanded
node, 1e-8 s per (edge, price) of the bound: the `*_WORK` constants.
Charged node by node, so a work limit stops the search at the same node
on any machine. Before, the labels were not charged at all.

NOTE (memory). Every expanded front is kept (the plan is read back through
it), in one set of growing arrays (`_Store`, 32 bytes a label, up to twice
that while they grow). A label an edge makes is not stored: the edge keeps
the range of its source's stored labels it takes (two integers), and the
target gathers them when it is expanded (`_arriving`). Before, each edge
made its own four arrays at once and parked them with its target: on
GPT-2's traced block repeated to 256 layers (2 million edges) the search
reached 7.5 GB within 20 work units, and after the label cap, it stopped
at the cap within a second, mostly for those arrays' own overhead.
`MAX_LABELS` caps the labels stored plus those the next node gathers
(~1.3 GB at 64 bytes each): past it the search stops as a work limit stops it, with its
best plan (or the incumbent) and a valid bound. A count, not a
measurement, so the stop falls at the same node on any machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from solvers.remat.menu_graph import MenuGraph
from solvers.remat.menus import MenuChain, MenuPlan

LABEL_WORK = 1e-7  # work units per label made (calibrated in the module NOTE)
EDGE_WORK = 1e-6  # work units per edge tried from an expanded node
REFINE = 2  # rounds of the bound at the least H of each edge's suffix (pruning 6)
MAX_LABELS = 20_000_000  # labels held at once, fronts and pending (module NOTE, memory)


def solve_menus(
    chain: MenuChain,
    room: int,
    *,
    incumbent: tuple[float, tuple[str, ...]] | None = None,
    charge: Callable[[float], None] = lambda units: None,
    expired: Callable[[], bool] = lambda: False,
) -> MenuResult:
    """The fastest keep/option/recompute plan whose peak is within `static + room`.

    A `MenuResult`: proven, the optimum (or no plan when none fits); cut short
    by the limit, the best plan known (the incumbent, or a completed label)
    with a lower bound on the optimum's makespan. One search, with the
    incumbent's seconds as its cap (`run`); `menu_optimum` drives searches
    with targets instead.
    """
    graph = MenuGraph.build(chain, room, charge=charge, expired=expired)
    if graph.stopped:
        return stopped_result(graph, None, incumbent, 0.0)
    if graph.empty:  # no completion of the empty plan fits
        found = better(graph, None, incumbent)
        return MenuResult(found, True, math.inf if found is None else found.makespan)
    cap = math.inf if incumbent is None else incumbent[0]
    done = run(graph, cap, charge=charge, expired=expired)
    if done.stopped:
        return stopped_result(graph, done, incumbent, graph.rest0)
    found = better(graph, done, incumbent)
    return MenuResult(found, True, math.inf if found is None else found.makespan)


@dataclass(frozen=True)
class MenuResult:
    """The search's answer: a plan (or None), whether it is proven optimal (or that none
    fits), and a lower bound on the optimum's makespan (`T_ideal` + seconds)."""

    plan: MenuPlan | None
    proven: bool
    lower: float


@dataclass(frozen=True)
class MenuRun:
    """One search's end: its best completion `(seconds, H, node index, label)` or None
    (none within its cap), the labels to read it back from (`_Store`), and whether the
    limit (`stopped`, the label cap included) or its own `work_cap` (`capped`) ended it."""

    best: tuple | None
    store: _Store | None
    stopped: bool = False
    capped: bool = False


def better(graph: MenuGraph, done: MenuRun | None, incumbent) -> MenuPlan | None:
    """The faster of a run's best completion and the incumbent (None if neither)."""
    best = None if done is None else done.best
    store = None if done is None else done.store
    return _better(graph.chain, best, incumbent, graph.order, store)


def stopped_result(graph: MenuGraph, done: MenuRun | None, incumbent, lower: float) -> MenuResult:
    """The answer of a search the limit stopped: the best plan known, `lower` seconds."""
    found = better(graph, done, incumbent)
    return MenuResult(found, False, graph.chain.profile.t_ideal + lower)


def run(
    graph: MenuGraph,
    cap: float,
    *,
    charge: Callable[[float], None] = lambda units: None,
    expired: Callable[[], bool] = lambda: False,
    work_cap: float = math.inf,
) -> MenuRun:
    """The fastest completion adding at most `cap` seconds (plus the tie slack), by
    labels pruned as the module NOTE says; `best` None: none within the cap (with
    `cap = inf`: no plan fits). Past `work_cap` units charged, stops `capped`."""
    tables, bound = graph.for_cap(cap, charge)
    order = graph.order
    spent = 0.0

    def pay(units: float) -> None:
        nonlocal spent
        spent += units
        charge(units)

    best_seconds = cap
    base, into, ptr, held_all, extra_all = _in_edges(tables)
    # an edge's labels: the stored labels lo..hi-1 of its source, moved along it
    lo = np.zeros(len(held_all), dtype=np.int64)
    hi = np.zeros(len(held_all), dtype=np.int64)
    pending = np.zeros(len(order), dtype=np.int64)  # labels waiting per node
    pending[0] = 1
    store = _Store()
    best: tuple | None = None  # (seconds, H, node index, label)
    for x in range(len(order)):
        if not pending[x]:
            continue
        if expired() or store.size + int(pending[x]) > MAX_LABELS:  # (module NOTE, memory)
            return MenuRun(best, store, stopped=True)
        if spent > work_cap:
            return MenuRun(best, store, capped=True)
        if x == 0:
            front = _pareto(np.zeros(1, np.int64), np.zeros(1), np.full(1, -1, np.int64))
        else:
            front = _pareto(
                *_arriving(store, into[ptr[x] : ptr[x + 1]], lo, hi, held_all, extra_all)
            )
        slack = 1e-9 * (1.0 + abs(best_seconds)) if best_seconds < math.inf else 0.0
        if best_seconds < math.inf:  # the Lagrangian bound (`menu_bound`'s NOTE)
            keep = front[1] + bound.lower(x, front[0]) <= best_seconds + slack + bound.margin
            if not keep.all():
                front = tuple(part[keep] for part in front)
                if not len(front[0]):
                    continue
        held_h, seconds = front[0], front[1]
        first = store.add(held_h, seconds, front[2], x)
        target, top_h, held, extra, after, _cost = tables[x]
        # (a) H-side prunings: a prefix of the front (H ascending)
        stop = np.searchsorted(held_h, top_h, side="right")
        # (b) the seconds prune: a suffix (seconds strictly descending along the front)
        if best_seconds < math.inf:
            cap_x = best_seconds + slack
            start = np.searchsorted(-seconds, extra + after - cap_x, side="left")
            # (c) the bound at the least H the suffix holds (it grows with H), twice
            inner = np.flatnonzero((target >= 0) & (start < stop))
            for _ in range(REFINE):
                if not len(inner):
                    break
                least = held_h[start[inner]] + held[inner]
                ahead = bound.lower_at(target[inner], least) - bound.margin
                start[inner] = np.searchsorted(-seconds, extra[inner] + ahead - cap_x, side="left")
                inner = inner[start[inner] < stop[inner]]
        else:
            start = np.zeros(len(target), dtype=np.int64)
        count = np.maximum(stop - start, 0)
        made = int(count.sum())
        pay(made * LABEL_WORK + len(target) * EDGE_WORK)
        if not made:
            continue
        final = (target < 0) & (count > 0)
        if final.any():  # completions: the fastest of each edge is its last label
            last = stop[final] - 1
            done = seconds[last] + extra[final]
            j = int(np.lexsort((held_h[last] + held[final], done))[0])
            if best is None or (done[j], int(held_h[last[j]] + held[final][j])) < best[:2]:
                best = (
                    float(done[j]),
                    int(held_h[last[j]] + held[final][j]),
                    x,
                    first + int(last[j]),
                )
            if best[0] < best_seconds:
                best_seconds = best[0]
        moved = np.flatnonzero((target >= 0) & (count > 0))
        lo[base[x] + moved] = first + start[moved]
        hi[base[x] + moved] = first + stop[moved]
        np.add.at(pending, target[moved], count[moved])
    return MenuRun(best, store)


class _Store:
    """Every expanded front's labels in one set of growing arrays: `H`, seconds, the
    label each came from (-1: the empty plan) and its node index."""

    def __init__(self) -> None:
        self.size = 0
        self.h = np.zeros(1024, dtype=np.int64)
        self.s = np.zeros(1024)
        self.parent = np.zeros(1024, dtype=np.int64)
        self.node = np.zeros(1024, dtype=np.int64)

    def add(self, h: np.ndarray, s: np.ndarray, parent: np.ndarray, node: int) -> int:
        """Append a front; returns the index of its first label."""
        first, end = self.size, self.size + len(h)
        if end > len(self.h):
            grown = max(end, 2 * len(self.h))
            for name in ("h", "s", "parent", "node"):
                old = getattr(self, name)
                new = np.zeros(grown, dtype=old.dtype)
                new[:first] = old[:first]
                setattr(self, name, new)
        self.h[first:end], self.s[first:end] = h, s
        self.parent[first:end], self.node[first:end] = parent, node
        self.size = end
        return first


def _in_edges(tables: list[tuple]) -> tuple[np.ndarray, ...]:
    """The edges as one numbering: each node index's first edge (`base`), the edges into
    each node (`into[ptr[x] : ptr[x + 1]]`, in the order they are made), `held`, `extra`."""
    count = len(tables)
    sizes = np.array([len(t[0]) for t in tables], dtype=np.int64)
    base = np.zeros(count + 1, dtype=np.int64)
    base[1:] = np.cumsum(sizes)
    empty = np.zeros(0, dtype=np.int64)
    target = np.concatenate([t[0] for t in tables] + [empty])
    held = np.concatenate([t[2] for t in tables] + [empty])
    extra = np.concatenate([t[3] for t in tables] + [np.zeros(0)])
    inner = np.flatnonzero(target >= 0)
    into = inner[np.argsort(target[inner], kind="stable")]
    ptr = np.zeros(count + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(np.bincount(target[inner], minlength=count))
    return base, into, ptr, held, extra


def _arriving(store: _Store, edges, lo, hi, held, extra) -> tuple[np.ndarray, ...]:
    """The labels the edges bring to their node: `(H, seconds, label each came from)`."""
    counts = hi[edges] - lo[edges]
    some = counts > 0
    edges, counts = edges[some], counts[some]
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    source = np.arange(total) + np.repeat(lo[edges] - starts, counts)
    h = store.h[source] + np.repeat(held[edges], counts)
    s = store.s[source] + np.repeat(extra[edges], counts)
    return h, s, source


def _better(chain: MenuChain, best: tuple | None, incumbent, order, store) -> MenuPlan | None:
    """The faster of the best completed label and the incumbent (None if neither)."""
    if best is not None and (incumbent is None or best[0] < incumbent[0]):
        return _plan(chain, best, order, store)
    if incumbent is None:
        return None
    actions, options = incumbent[1], (None,) * chain.n
    makespan = chain.profile.t_ideal + incumbent[0]
    return MenuPlan(actions, options, makespan, chain.peak(actions, options))


def _pareto(held: np.ndarray, seconds: np.ndarray, source: np.ndarray) -> tuple:
    """The labels not dominated in (H, seconds), by H ascending (ties: the first made),
    as arrays `(H, seconds, label each came from)`."""
    order = np.lexsort((seconds, held))
    seconds = seconds[order]
    floor = np.minimum.accumulate(seconds)
    keep = np.empty(len(seconds), dtype=bool)
    keep[0] = True
    keep[1:] = seconds[1:] < floor[:-1]
    order = order[keep]
    return held[order], seconds[keep], source[order]


def _plan(chain: MenuChain, best: tuple, order, store: _Store) -> MenuPlan:
    n = chain.n
    actions = ["recompute"] * n
    options: list[str | None] = [None] * n
    label = best[3]
    while label >= 0 and store.node[label] > 0:
        k, a = order[int(store.node[label])]
        actions[k] = "keep"
        options[k] = chain.choices[k][a][0]
        label = int(store.parent[label])
    makespan = chain.profile.t_ideal + best[0]
    return MenuPlan(
        tuple(actions), tuple(options), makespan, chain.peak(tuple(actions), tuple(options))
    )
