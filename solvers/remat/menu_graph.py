"""The menu search's graph: its edges, the lookahead, and the bound each cap may use.

NOTE (a bound per cap: the subgraph a cap allows). A search with cap `c`
(`menu_search.run`) looks only for plans adding at most `c` seconds. Let
`fw[x]` be the least seconds of any path from the root to node `x` (memory
ignored, a forward pass over the edges) and `rest[w]` the least seconds of
any completion from `w` (the lookahead). A plan adding `S <= c` seconds
takes an edge `e` from `x` to `w` only if `fw[x] + extra_e + rest[w] <= S`
(its part below `x`, the edge, and its part above `w`, each at least the
least), so every plan within the cap lies in the subgraph of the edges with
`fw[x] + extra_e + rest[w] <= c` (`restrict`; plus a relative `TOLERANCE`
against the floats' different order of summation). `menu_bound`'s proof
holds on any graph that holds the completion, so the bound computed on
that subgraph is below the rest of every plan within the cap: pruning with
it against a cap `<= c` loses none of them, which is all a capped search
claims. Most edges fail the test (a long run recomputes more than a whole
plan's slack): on the random 1,000-layer chain with menus, the subgraph of
`menu_optimum`'s caps holds 17 times fewer edges than the graph at 70%
(65 thousand of 1.1 million), 4 times fewer at 50%, 1.5 at 30%. The
bound's first grid of prices is computed on every edge (valid for any cap;
it finds the root's price), the finer prices on the subgraph of the cap
asked for, rebuilt when a larger cap comes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from solvers.remat.menu_bound import MenuBound
from solvers.remat.menu_edges import MenuEdges
from solvers.remat.menus import DEAD, NEG, MenuChain

SEGMENT_WORK = 1e-7  # work units per segment cost computed (`MenuEdges.tried`)
BOUND_WORK = 1e-8  # work units per (edge, price) of the Lagrangian bound
OPEN = 1 << 62  # no limit on H from this edge
TOLERANCE = 1e-9  # relative slack of `restrict`'s test (module NOTE)


class MenuGraph:
    """The edges, lookahead and Lagrangian bound of one `(chain, room)`, built once;
    `for_cap(c)` gives the tables and bound a search with a cap `<= c` uses."""

    def __init__(self, chain: MenuChain, room: int, order, tables, fw, bound, rest0, stopped):
        self.chain, self.room, self.order = chain, room, order
        self.tables, self.fw, self.coarse, self.rest0 = tables, fw, bound, rest0
        self.stopped = stopped  # the limit came while the edges were built
        self.empty = tables is None and not stopped  # no plan fits: nothing to search
        self._built: tuple | None = None  # (cap, tables, bound) of the last `for_cap`
        self.back = None  # `menu_back`'s shared arrays of the last tables it searched

    @classmethod
    def build(
        cls,
        chain: MenuChain,
        room: int,
        *,
        charge: Callable[[float], None] = lambda units: None,
        expired: Callable[[], bool] = lambda: False,
    ) -> MenuGraph:
        order = [(-1, 0)] + [(k, a) for k in range(chain.n) for a in range(len(chain.choices[k]))]
        if chain.pg_from[0] > room:
            return cls(chain, room, order, None, None, None, math.inf, False)
        edges, evaluated = _edges(chain, order, room, expired)
        charge(evaluated * SEGMENT_WORK)
        if edges is None:
            return cls(chain, room, order, None, None, None, 0.0, True)
        need, rest = _lookahead(edges)
        if rest[0] == math.inf or need[0] > room:
            return cls(chain, room, order, None, None, None, math.inf, False)
        tables = _edge_tables(edges, need, rest, room)
        fw = forward_least(tables)
        bound = MenuBound(chain, tables, room)
        charge(_edge_count(tables) * len(bound.prices) * BOUND_WORK)
        return cls(chain, room, order, tables, fw, bound, float(rest[0]), False)

    def root(self) -> float:
        """A lower bound on the seconds any plan adds (the coarse bound's, or `rest`'s)."""
        return max(self.coarse.root(), self.rest0)

    def for_cap(
        self, cap: float, charge: Callable[[float], None] = lambda units: None
    ) -> tuple[list[tuple], MenuBound]:
        """The edge tables and the bound of the subgraph within `cap` (module NOTE): valid
        for a search whose cap is at most `cap`. Reuses the last one built when it covers
        `cap`; `cap = inf`: every edge."""
        if self._built is not None and self._built[0] >= cap:
            return self._built[1], self._built[2]
        tables = self.tables if cap == math.inf else restrict(self.tables, self.fw, cap)
        bound = self.coarse.refine(tables)
        charge(_edge_count(tables) * (len(bound.prices) - len(self.coarse.prices)) * BOUND_WORK)
        self._built = (cap, tables, bound)
        return tables, bound


def restrict(tables: list[tuple], fw: np.ndarray, cap: float) -> list[tuple]:
    """The edges a plan adding at most `cap` seconds may take (module NOTE)."""
    limit = cap + TOLERANCE * (1.0 + abs(cap))
    out = []
    for x, (target, top, held, extra, after, cost) in enumerate(tables):
        keep = fw[x] + extra + after <= limit
        if keep.all():
            out.append((target, top, held, extra, after, cost))
        else:
            out.append(tuple(part[keep] for part in (target, top, held, extra, after, cost)))
    return out


def _edge_count(tables: list[tuple]) -> int:
    return sum(len(t[0]) for t in tables)


def forward_least(tables: list[tuple]) -> np.ndarray:
    """Per node index, the least seconds of a path from the root to it (memory ignored)."""
    fw = np.full(len(tables), np.inf)
    fw[0] = 0.0
    for x, (target, _top, _held, extra, _after, _cost) in enumerate(tables):
        inner = target >= 0
        if fw[x] < math.inf and inner.any():
            np.minimum.at(fw, target[inner], fw[x] + extra[inner])
    return fw


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
