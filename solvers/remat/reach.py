"""Whether any keep/recompute plan fits, and the space's minimum budget: no labels needed.

NOTE (why one pass is exact). A path reaching a kept layer holding less
below it can follow every path one holding more can (`H` enters every
later constraint as `H + c <= room` and grows by fixed amounts), so for
feasibility each layer keeps only its smallest `H`: one pass over the
edges (`reach`). The same pass, its room raised edge by edge, finds the
smallest peak of any plan (`least_peak`). Both read `pychain`'s rows, and
`short`'s searches call them first, as `remat_dp` does on longer chains
(after `longest_runs`); the tests check them against enumeration, and on
long chains against `minpeak`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from heapq import heappop, heappush

from solvers.remat.chain import ChainModel
from solvers.remat.labels import WORK_PER_CANDIDATE
from solvers.remat.pychain import PyChain

INF = math.inf
# NOTE (size). These passes charge no work and never look at the clock,
# and their cost grows faster than the chain (synthetic chain, 1,000
# layers: 43-114 ms); their callers use them up to this length, where the
# numpy searches, which do both, take over, so a time or work limit at
# 10^4-10^5 layers holds.
REACH_MAX_LAYERS = 1_000


def reach(model: PyChain, room: int) -> tuple[tuple[int, ...] | None, float]:
    """`(kept, next)`: the kept layers of a plan within `room`, or None and `next`, a
    peak above static that no plan is below (more than `room`; INF if none fits at all).

    Exact (the module note): each layer keeps only its smallest `H`.

    NOTE (`next`, a proven lower bound). When nothing fits, every plan's
    path has a first edge this pass refused, taken from a layer it reached
    (had every edge been accepted, the pass would have reached the top
    through them). Up to that edge the path holds at least the least `H`
    of each layer it meets (induction along the path), so the plan's peak
    is at least `least[x] + c` of that refused edge: the smallest such sum
    over every refused edge bounds every plan's peak from below. Tops past
    where a row stopped cost at least the growing terms it stopped at.
    """
    n = model.n
    near, r_node, base, row_of = model.near, model.r_node, model.base, model.row
    rows, grown = model.rows, model.grown
    least = [INF] * (n + 1)
    prev = [-1] * (n + 1)
    least[0] = 0
    nxt = INF
    end = -1
    for x in range(n):
        h = least[x]
        if h == INF:
            continue
        limit = room - h
        if near[x] <= limit:  # keep the next layer
            if h + r_node[x] < least[x + 1]:
                least[x + 1], prev[x + 1] = h + r_node[x], x
        elif h + near[x] < nxt:
            nxt = h + near[x]
        row = rows[x]
        span = len(row)
        if span < n - x and grown[x] <= limit:  # the row stops short of what may fit
            row = row_of(x, limit)
            span = len(row)
        if span == n - x and row[-1] <= limit:  # a run to the top
            end = x
            break
        held = h + base[x]
        for y, cost in enumerate(row, x + 2):  # a run x .. y-2, then keep y-1 (or the top)
            if cost > limit:
                if h + cost < nxt:
                    nxt = h + cost
            elif y <= n and held < least[y]:
                least[y], prev[y] = held, x
        if span < n - x:  # the tops past the row cost at least its growing terms
            grow = h + grown[x]
            if grow < nxt:
                nxt = grow
    else:
        if least[n] < INF:  # the top layer kept
            end = n
    if end < 0:
        return None, nxt
    kept = []
    while end > 0:
        kept.append(end - 1)
        end = prev[end]
    return tuple(sorted(kept)), room


def plan_fits(model: PyChain, room: int) -> bool:
    """Whether some plan's peak is within `room` (above static): exact, no labels."""
    return longest_runs(model, room) is not None or reach(model, room)[0] is not None


def longest_runs(model: PyChain, room: int) -> tuple[int, ...] | None:
    """The kept layers of a plan within `room` found greedily, or None (which proves nothing).

    NOTE (why). `reach` decides feasibility exactly, but on long chains at
    roomy budgets its rows run far (gpt-48 at 50%: 59 ms, the synthetic
    chain of 1,000 layers: 114 ms); this walk reads only the rows of the
    layers it keeps: from each, the longest run that fits (else keep the
    next layer). It follows only edges `reach` accepts, so a plan it
    returns fits; when it fails, `reach` decides.
    """
    n = model.n
    near, r_node, base, row_of = model.near, model.r_node, model.base, model.row
    x, h = 0, 0
    kept: list[int] = []
    while x < n:
        limit = room - h
        row = row_of(x, limit)
        span = len(row)
        if span == n - x and row[-1] <= limit:  # a run to the top
            return tuple(kept)
        for i in range(min(span, n - x - 1) - 1, -1, -1):  # a run x .. y-2, then keep y-1
            if row[i] <= limit:
                y = x + 2 + i
                kept.append(y - 1)
                h += base[x]
                x = y
                break
        else:
            if near[x] > limit:
                return None
            kept.append(x)  # keep the next layer
            h += r_node[x]
            x += 1
    return tuple(kept)  # the top layer kept


def min_peak_short(
    model: PyChain | ChainModel, lower: int, charge: Callable[[float], None] = lambda units: None
) -> tuple[int, tuple[int, ...]]:
    """The smallest peak above static bytes of any plan, and a plan reaching it.

    `lower`: a peak no plan is below (see `least_peak`; measured on the
    synthetic and random chains of 1-64 layers: 2x faster than the passes
    of `reach` it replaces, themselves 1.5-2x faster than bisection).
    """
    if not isinstance(model, PyChain):
        model = PyChain(model.profile)
    return least_peak(model, lower, charge)


def least_peak(
    model: PyChain, lower: int, charge: Callable[[float], None] = lambda units: None
) -> tuple[int, tuple[int, ...]]:
    """`reach` whose room rises event by event, from `lower` up to the space's minimum.

    NOTE (why it is exact). It keeps `reach`'s invariant at a room `U`
    (first `lower`, a peak no plan is below): each reached layer holds its
    least `H`, and every edge from it is either taken (`H + c <= U`) or
    waits in a heap at its value `H + c` (a row cut short waits at its
    growing terms). When nothing more is reachable, `reach`'s argument
    makes the heap's least value a peak no plan is below: `U` rises to it
    and only the layer whose edge it is gets scanned again (then the layers
    whose `H` that lowers). The first time the top is reached, its path
    fits `U`, which no plan is below: its peak is the minimum. A rise costs
    a scan of the layers it touches, not a pass over the chain.
    """
    n = model.n
    near, r_node, base, rows, grown, row_of = (
        model.near,
        model.r_node,
        model.base,
        model.rows,
        model.grown,
        model.row,
    )
    least = [INF] * (n + 1)
    prev = [-1] * (n + 1)
    scanned_at = [0] * (n + 1)  # the room each layer was last scanned at
    queued = [False] * (n + 1)
    least[0] = 0
    room = lower
    waiting: list[tuple[int, int, int]] = []  # (value, layer index, its H then)
    dirty = [0]  # layers to scan, lowest first
    queued[0] = True

    def take(y: int, held: int, x: int) -> None:
        """The edge into `y` fits: `y` holds `held` below it if that is its least."""
        if held < least[y]:
            least[y], prev[y] = held, x
            if not queued[y]:
                queued[y] = True
                heappush(dirty, y)

    end = -1
    while end < 0:
        while dirty and end < 0:  # scan what the room reaches, bottom up
            x = heappop(dirty)
            queued[x] = False
            if x == n:  # the top layer kept
                end = x
                break
            charge(n * WORK_PER_CANDIDATE)
            h = least[x]
            scanned_at[x] = room
            limit = room - h
            if near[x] <= limit:  # keep the next layer
                take(x + 1, h + r_node[x], x)
            else:
                heappush(waiting, (h + near[x], x, h))
            row = rows[x]
            if len(row) < n - x and grown[x] <= limit:
                row = row_of(x, limit)
            held = h + base[x]
            for y, cost in enumerate(row, x + 2):  # a run x .. y-2, then keep y-1 (or the top)
                if cost > limit:
                    heappush(waiting, (h + cost, x, h))
                elif y > n:  # the run reaches the top
                    end = x
                    break
                else:
                    take(y, held, x)
            if len(row) < n - x:  # tops past the row cost at least its growing terms
                heappush(waiting, (h + grown[x], x, h))
        while end < 0:  # nothing more fits: the least waiting value is a peak no plan is below
            if not waiting:
                raise AssertionError("keep-all's path ends, so something always waits")
            value, x, h = heappop(waiting)
            if h == least[x] and not queued[x] and value > scanned_at[x]:  # not stale
                room = max(room, value)
                queued[x] = True
                heappush(dirty, x)
                break
    kept = []
    while end > 0:
        kept.append(end - 1)
        end = prev[end]
    return room, tuple(sorted(kept))
