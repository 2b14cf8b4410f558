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
it) and every label made waits in its target's pending list, so memory
grows with the labels, faster than the work charged for them: on GPT-2's
traced block repeated to 256 layers the search reached 7.5 GB within 20
work units. `MAX_LABELS` caps the labels held (about 64 bytes each, fronts
and pending together: ~1.3 GB; a pending piece counts `PIECE_LABELS` more
for its arrays' own overhead): past it the search stops as a work limit
stops it, with its best plan (or the incumbent) and a valid bound. A count,
not a measurement, so the stop falls at the same node on any machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from solvers.remat.menu_bound import MenuBound
from solvers.remat.menu_edges import MenuEdges
from solvers.remat.menus import DEAD, NEG, MenuChain, MenuPlan

LABEL_WORK = 1e-7  # work units per label made (calibrated in the module NOTE)
EDGE_WORK = 1e-6  # work units per edge tried from an expanded node
SEGMENT_WORK = 1e-7  # work units per segment cost computed (`MenuEdges.tried`)
BOUND_WORK = 1e-8  # work units per (edge, price) of the Lagrangian bound
OPEN = 1 << 62  # no limit on H from this edge
REFINE = 2  # rounds of the bound at the least H of each edge's suffix (pruning 6)
MAX_LABELS = 20_000_000  # labels held at once, fronts and pending (module NOTE, memory)
PIECE_LABELS = 8  # a pending piece's own cost in labels (four small arrays and a tuple)


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
    with a lower bound on the optimum's makespan. Labels `(H, seconds)` per
    node `(k, a)`, kept as numpy arrays, Pareto-pruned; nodes in layer order, so
    a node's front is final when it is expanded. The prunings (each proven in
    the module NOTE) cut every edge's labels to one index range of the front.
    Work: the `*_WORK` constants (module NOTE), charged node by node.
    """
    n = chain.n
    if chain.pg_from[0] > room:
        return MenuResult(None, True, math.inf)
    order = [(-1, 0)] + [(k, a) for k in range(n) for a in range(len(chain.choices[k]))]
    edges, evaluated = _edges(chain, order, room, expired)
    charge(evaluated * SEGMENT_WORK)
    if edges is None:
        return _stopped(chain, None, incumbent, 0.0, order, {})
    need, rest = _lookahead(edges)
    lower = float(rest[0])
    if lower == math.inf or need[0] > room:  # no completion of the empty plan fits
        found = _better(chain, None, incumbent, order, {})
        return MenuResult(found, True, math.inf if found is None else found.makespan)
    tables = _edge_tables(edges, need, rest, room)
    bound = MenuBound(chain, tables, room)
    charge(sum(len(t[0]) for t in tables) * len(bound.prices) * BOUND_WORK)
    best_seconds = math.inf if incumbent is None else incumbent[0]
    # pending[x]: the label pieces (H, seconds, parent node index, parent position) for node x
    pending: list[list[tuple]] = [[] for _ in order]
    pending[0].append((np.zeros(1, np.int64), np.zeros(1), -1, np.zeros(1, np.int64)))
    fronts: dict[int, tuple] = {}
    best: tuple | None = None  # (seconds, H, node index, position)
    held_labels = 1 + PIECE_LABELS  # labels in `fronts` and `pending` (MAX_LABELS)
    for x in range(len(order)):
        if not pending[x]:
            continue
        if expired() or held_labels > MAX_LABELS:
            return _stopped(chain, best, incumbent, lower, order, fronts)
        held_labels -= sum(len(piece[0]) + PIECE_LABELS for piece in pending[x])
        front = _pareto(pending[x])
        pending[x] = []
        slack = 1e-9 * (1.0 + abs(best_seconds)) if best_seconds < math.inf else 0.0
        if best_seconds < math.inf:  # the Lagrangian bound (`menu_bound`'s NOTE)
            keep = front[1] + bound.lower(x, front[0]) <= best_seconds + slack + bound.margin
            if not keep.all():
                front = tuple(part[keep] for part in front)
                if not len(front[0]):
                    continue
        fronts[x] = front
        held_labels += len(front[0])
        held_h, seconds = front[0], front[1]
        target, top_h, held, extra, after, _cost = tables[x]
        # (a) H-side prunings: a prefix of the front (H ascending)
        stop = np.searchsorted(held_h, top_h, side="right")
        # (b) the seconds prune: a suffix (seconds strictly descending along the front)
        if best_seconds < math.inf:
            cap = best_seconds + slack
            start = np.searchsorted(-seconds, extra + after - cap, side="left")
            # (c) the bound at the least H the suffix holds (it grows with H), twice
            inner = np.flatnonzero((target >= 0) & (start < stop))
            for _ in range(REFINE):
                if not len(inner):
                    break
                least = held_h[start[inner]] + held[inner]
                ahead = bound.lower_at(target[inner], least) - bound.margin
                start[inner] = np.searchsorted(-seconds, extra[inner] + ahead - cap, side="left")
                inner = inner[start[inner] < stop[inner]]
        else:
            start = np.zeros(len(target), dtype=np.int64)
        count = np.maximum(stop - start, 0)
        made = int(count.sum())
        charge(made * LABEL_WORK + len(target) * EDGE_WORK)
        if not made:
            continue
        held_labels += made + PIECE_LABELS * int(np.count_nonzero((target >= 0) & (count > 0)))
        final = (target < 0) & (count > 0)
        if final.any():  # completions: the fastest of each edge is its last label
            last = stop[final] - 1
            done = seconds[last] + extra[final]
            j = int(np.lexsort((held_h[last] + held[final], done))[0])
            if best is None or (done[j], int(held_h[last[j]] + held[final][j])) < best[:2]:
                best = (float(done[j]), int(held_h[last[j]] + held[final][j]), x, int(last[j]))
            if best[0] < best_seconds:
                best_seconds = best[0]
        for e in np.flatnonzero((target >= 0) & (count > 0)).tolist():
            pos = np.arange(start[e], stop[e])
            pending[target[e]].append((held_h[pos] + held[e], seconds[pos] + extra[e], x, pos))
    found = _better(chain, best, incumbent, order, fronts)
    return MenuResult(found, True, math.inf if found is None else found.makespan)


@dataclass(frozen=True)
class MenuResult:
    """The search's answer: a plan (or None), whether it is proven optimal (or that none
    fits), and a lower bound on the optimum's makespan (`T_ideal` + seconds)."""

    plan: MenuPlan | None
    proven: bool
    lower: float


def _better(chain: MenuChain, best: tuple | None, incumbent, order, fronts) -> MenuPlan | None:
    """The faster of the best completed label and the incumbent (None if neither)."""
    if best is not None and (incumbent is None or best[0] < incumbent[0]):
        return _plan(chain, best, order, fronts)
    if incumbent is None:
        return None
    actions, options = incumbent[1], (None,) * chain.n
    makespan = chain.profile.t_ideal + incumbent[0]
    return MenuPlan(actions, options, makespan, chain.peak(actions, options))


def _stopped(chain: MenuChain, best, incumbent, lower: float, order, fronts) -> MenuResult:
    found = _better(chain, best, incumbent, order, fronts)
    return MenuResult(found, False, chain.profile.t_ideal + lower)


def _edges(chain: MenuChain, order, room: int, expired: Callable[[], bool]):
    """Every segment that fits an empty `H` from each node index, as arrays `(target node
    index or -1 at the chain's end, cost, held, seconds)`; None when the limit came first."""
    n = chain.n
    builder = MenuEdges(chain)
    offset = [0] * (n + 1)
    for x, (k, a) in enumerate(order):
        if k >= 0 and a == 0:
            offset[k] = x
    offset_arr = np.array(offset, dtype=np.int64)
    edges = []
    for k, a in order:
        if expired():
            return None, builder.tried
        t, b, cost, held, extra = builder.node(k, a, room)
        target = np.where(t + 1 < n, offset_arr[np.minimum(t + 1, n - 1)] + b, -1)
        edges.append((target, cost, held, extra))
    return edges, builder.tried


def _lookahead(edges) -> tuple[np.ndarray, np.ndarray]:
    """Per node index: `need`, the least `H`-relative peak any completion has (NEG: none
    has an op; DEAD: no completion fits), and `rest`, the least seconds any completion
    adds with `H` ignored (inf: none)."""
    count = len(edges)
    need = np.full(count, DEAD, dtype=np.int64)
    rest = np.full(count, np.inf)
    for x in range(count - 1, -1, -1):
        target, cost, held, extra = edges[x]
        final = target < 0
        safe = np.where(final, 0, target)
        ok = final | np.isfinite(rest[safe])
        if not ok.any():
            continue
        later = need[safe]
        total = np.where(final, cost, np.maximum(cost, np.where(later > NEG, held + later, NEG)))
        seconds = extra + np.where(final, 0.0, rest[safe])
        need[x] = total[ok].min()
        rest[x] = seconds[ok].min()
    return need, rest


def _edge_tables(edges, need, rest, room: int) -> list[tuple]:
    """Per node index, its edges as arrays: the target node's index (-1: the chain's
    end), the largest `H` a label may hold to take the edge (its segment fits and
    the target's `need` still fits above it), `held`, seconds added, `rest` of the
    target (a lower bound on the seconds any completion from there adds), and cost."""
    tables = []
    for target, cost, held, extra in edges:
        final = target < 0
        safe = np.where(final, 0, target)
        limit = np.where(cost > NEG, room - cost, OPEN)
        ahead = np.where(final, NEG, need[safe])
        limit = np.minimum(limit, np.where(ahead > NEG, room - ahead - held, OPEN))
        after = np.where(final, 0.0, rest[safe])
        tables.append((target, limit, held, extra, after, cost))
    return tables


def _pareto(pieces: list[tuple]) -> tuple:
    """The labels not dominated in (H, seconds), by H ascending (ties: the first made),
    as arrays `(H, seconds, parent node index, parent position)`."""
    held = np.concatenate([p[0] for p in pieces])
    seconds = np.concatenate([p[1] for p in pieces])
    parent = np.concatenate([np.full(len(p[0]), p[2], dtype=np.int64) for p in pieces])
    pos = np.concatenate([p[3] for p in pieces])
    order = np.lexsort((seconds, held))
    seconds = seconds[order]
    floor = np.minimum.accumulate(seconds)
    keep = np.empty(len(seconds), dtype=bool)
    keep[0] = True
    keep[1:] = seconds[1:] < floor[:-1]
    order = order[keep]
    return held[order], seconds[keep], parent[order], pos[order]


def _plan(chain: MenuChain, best: tuple, order, fronts) -> MenuPlan:
    n = chain.n
    actions = ["recompute"] * n
    options: list[str | None] = [None] * n
    x, pos = best[2], best[3]
    while x > 0:
        k, a = order[x]
        actions[k] = "keep"
        options[k] = chain.choices[k][a][0]
        front = fronts[x]
        x, pos = int(front[2][pos]), int(front[3][pos])
    makespan = chain.profile.t_ideal + best[0]
    return MenuPlan(
        tuple(actions), tuple(options), makespan, chain.peak(tuple(actions), tuple(options))
    )
