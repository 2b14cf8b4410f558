"""The recompute-only optimum at one budget: bound, target, search, proof.

NOTE (targets). A search drops every label whose bound is below its target
(see `labels`); the nearer the target to the optimum, the fewer labels it
looks at. The first target is the root bound less the largest forward of
one layer (the Lagrangian bound of a knapsack is within one item's value of
its optimum; on the synthetic chains the root bound was 1.0 ms above the
optimum at 1,000 layers). A search that reaches its target has proven its
plan optimal; one that finds a plan below its target is run once more with
that plan's value as target (then it is exact). One that finds nothing
first asks whether any plan fits (exact: up to `REACH_MAX_LAYERS` layers
`reach`'s label-free pass, milliseconds; beyond, `minpeak`), then puts
the target three times further below the bound each time, down to no
target at all.

NOTE (why three). Where the bound is loose the target prunes little, so a
failed search costs about what the successful one does. On the bundled
transformer chains the optimum lay 1.6-2.5 largest forwards below the
bound, on the synthetic chains within one: doubling the distance took
three searches on four of the five transformer cases that need a second
(gpt-24 at 30%: 3.4, 3.4 and 3.0 s, and 0.8 s for `minpeak` between), three
forwards below reaches every one in the second (gpt-24 at 30%: 2.6 and
2.8 s; at 50%, where two forwards sufficed, 2.1 and 4.6 s against 2.4
and 4.2), and four prunes too little (at 50%: 6.6 s for the second).

NOTE (the grid). Where the Lagrangian bound is loose, a second bound
(`grid`: every segment's constraint kept, bytes on a grid of up to 4,096
steps) was 0.8-3% above the optimum on the bundled transformer nets,
against 22-79%; it costs one cell per far edge and grid step. The first
search may spend `GRID_CAP` times what the grid would cost; if it misses
its target or runs past that, the grid is built, labels are tested against
both bounds, and the targets start again a quarter forward below the
tighter root (a miss with a tight bound is cheap). On the synthetic chains
the first search finishes well inside its share (or the grid would be too
coarse to build) and nothing changes; gpt-48 at 30%: 25 s -> 7-8 s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from solvers.remat.bounds import BoundStopped, CompletionBound
from solvers.remat.chain import ChainModel
from solvers.remat.grid import GridBound, grid_steps
from solvers.remat.grid import cost_of as grid_cost
from solvers.remat.labels import WORK_PER_CANDIDATE, Found, LabelSearch, SearchStats
from solvers.remat.minpeak import MinPeak, min_peak
from solvers.remat.pychain import PyChain
from solvers.remat.reach import REACH_MAX_LAYERS, least_peak, plan_fits
from solvers.remat.short import (
    PLAIN_LAYERS,
    SHORT_LAYERS,
    PriceBound,
    ShortChain,
    search,
)

ROUNDS = 4  # lowered targets tried before the last search, which has none
TARGET_STEPS = 3  # each failed search puts the next target this many times further down
GRID_FIRST_STEP = 0.25  # with the grid's bound, the first target: this many forwards below it
GRID_CAP = 4  # the first search's work, in grids' costs, before the grid is built


@dataclass(frozen=True)
class Optimum:
    """What the DP proved at one budget.

    `found` is the best plan (None: none fits, or the limit came first);
    `proven` says it is optimal (or, with no plan, that none fits);
    `upper` bounds the forward time any plan can save (the root bound, or
    the optimum itself once proven); `minimum` is the space's smallest
    peak where it was computed (to prove that nothing fits).
    """

    found: Found | None
    proven: bool
    upper: float
    searches: int
    stats: SearchStats | None
    minimum: MinPeak | None = None


def solve_room(
    model: ChainModel | PyChain,
    room: int,
    *,
    charge: Callable[[float], None] = lambda units: None,
    expired: Callable[[], bool] = lambda: False,
) -> Optimum:
    """The plan saving the most forward time whose peak is at most `static + room`."""
    if room < model.pg_total:
        return Optimum(None, True, -np.inf, 0, None)
    if isinstance(model, PyChain) or (model.n <= SHORT_LAYERS and model.tabled):
        return solve_short(model, room, charge=charge, expired=expired)
    try:
        bound = CompletionBound(model, room, charge, expired)
    except BoundStopped:  # the limit came first (10^4 layers: seconds to build)
        return Optimum(None, False, np.inf, 0, None)
    upper = bound.root()
    if upper == -np.inf:  # not even the relaxation fits
        return Optimum(None, True, upper, 0, None)
    search = LabelSearch(model, room, bound)
    total = float(model.fwd.sum())
    tol = 1e-9 * max(total, 1e-300)
    largest = float(model.fwd.max(initial=0.0))
    step = largest
    steps = grid_steps(model, bound.tmax)
    # the first search may spend a few times what the grid costs; past that, the grid
    cap = GRID_CAP * grid_cost(model, bound.tmax, steps) if steps else np.inf
    minimum: MinPeak | None = None
    searches = 0
    checked = False  # whether some plan is known to fit
    round_ = 0

    def run(target: float, work_cap: float = np.inf):
        nonlocal searches
        searches += 1
        return search.run(target, tol=tol, charge=charge, expired=expired, work_cap=work_cap)

    while True:
        target = -np.inf if round_ >= ROUNDS else upper - step
        found, stats = run(target, cap if bound.grid is None else np.inf)
        if stats.stopped:
            return Optimum(found, False, upper, searches, stats, minimum)
        if found is not None:
            if found.saved >= target - tol:
                return Optimum(found, True, found.saved, searches, stats, minimum)
            # A plan below the target: the search with its value as target is exact.
            again, stats = run(found.saved)
            best = again if again is not None and again.saved > found.saved else found
            return Optimum(best, not stats.stopped, best.saved, searches, stats, minimum)
        if not stats.capped and not checked:  # the target, or the room?
            checked = True
            if model.n <= REACH_MAX_LAYERS:  # the label-free pass, milliseconds
                if not plan_fits(PyChain(model.profile), room):
                    return Optimum(None, True, -np.inf, searches, stats)
            else:
                minimum = min_peak(model, charge=charge, expired=expired)
                if not minimum.proven:
                    return Optimum(None, False, upper, searches, stats, minimum)
                if minimum.peak > model.static + room:
                    return Optimum(None, True, -np.inf, searches, stats, minimum)
        if bound.grid is None and steps:  # the Lagrangian bound is loose here: the grid's
            try:
                bound.add_grid(GridBound(model, room, bound.tmax, steps, charge, expired))
            except BoundStopped:
                return Optimum(None, False, upper, searches, stats, minimum)
            upper = bound.root()
            if upper == -np.inf:  # not even the grid's relaxation fits
                return Optimum(None, True, upper, searches, stats, minimum)
            step, round_ = largest * GRID_FIRST_STEP, 0
            continue
        if target == -np.inf:
            raise AssertionError("the search without a target finds a plan whenever one fits")
        step *= TARGET_STEPS
        round_ += 1


def solve_short(
    model: ChainModel | PyChain,
    room: int,
    *,
    charge: Callable[[float], None] = lambda units: None,
    expired: Callable[[], bool] = lambda: False,
) -> Optimum:
    """`solve_room` on a short chain, by `short`'s plain-Python searches (see its note).

    First whether any plan fits (`reach.least_peak` from the room: if none,
    its room rises to the space's minimum, which says by how much). Up to `PLAIN_LAYERS` layers one
    search without a bound follows (exact). Beyond, that plan and the bound's best
    argmax path that fits are the incumbent; the first search's target is
    the higher of it and the root bound less the largest forward. A search
    that reaches its target has proven its plan; one that misses is
    followed by one with the best value found as target (exact).
    """
    if not isinstance(model, PyChain):
        model = PyChain(model.profile)
    # one pass: a plan within the room, or (the room raised until one fits) the minimum
    reached, some = least_peak(model, room, charge)
    if reached > room:  # exact: nothing fits; the space's minimum says by how much
        peak = model.static + max(reached, model.pg_total)
        return Optimum(None, True, -np.inf, 0, None, MinPeak(peak, some, True, peak, 1))
    chain = ShortChain(model, room)
    if chain.n <= PLAIN_LAYERS:  # fronts of a few labels: a bound costs more than it saves
        found, stats = search(chain, None, -np.inf, charge=charge, expired=expired)
        if found is None:  # stopped before the top
            found = Found(some, math.fsum(chain.fwd[i] for i in some))
        return Optimum(found, not stats.stopped, found.saved, 1, stats)
    bound = PriceBound(chain)
    charge(bound.evaluations * (chain.n + 1) * chain.n * WORK_PER_CANDIDATE / 2)
    upper = bound.root
    tol = 1e-9 * max(math.fsum(chain.fwd), 1e-300)
    incumbent = Found(some, math.fsum(chain.fwd[i] for i in some))
    if bound.incumbent is not None and bound.incumbent[0] > incumbent.saved:
        incumbent = Found(bound.incumbent[1], bound.incumbent[0])
    if incumbent.saved >= upper - tol:  # the bound is tight: nothing to search
        return Optimum(incumbent, True, incumbent.saved, 0, None)
    target = max(upper - max(chain.fwd, default=0.0), incumbent.saved)
    searches = 0
    while True:
        searches += 1
        found, stats = search(chain, bound, target - tol, charge=charge, expired=expired)
        if found is None or found.saved < incumbent.saved:
            found = incumbent
        if stats.stopped:
            return Optimum(found, False, upper, searches, stats)
        if found.saved >= target - tol:
            return Optimum(found, True, found.saved, searches, stats)
        target = found.saved  # below the target: with the best value as target it is exact
