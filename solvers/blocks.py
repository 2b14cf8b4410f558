"""Method "blocks": plan a net of repeated blocks by deciding each block once per class of copies.

A composition of the search tier: the warm-start portfolio, the
repeated-block neighbourhoods (`solvers.search.repeats`), the search driver
and the relaxation's bound. Without repeats it is the layer search of
`lns` (the message says so). Measured cost against the proven optimum on
small nets of k copies, and the gap to the lower bound on GPT-12..96:
experiments/results/bench_blocks.md.
"""

from __future__ import annotations

from collections.abc import Callable

from planopt.blocks import BlockStructure, find_blocks
from planopt.problem import Problem
from planopt.result import SolverOutput
from solvers.lns import (
    RECOMPUTE_SHARE,
    WINDOW_WORK,
    bounded,
    check_options,
    finish,
    layer_phases,
)
from solvers.search.bounds import relaxation_lower_bound
from solvers.search.driver import Phase, Report, search
from solvers.search.engine import Incumbent
from solvers.search.repeats import block_phases
from solvers.search.starts import RECOMPUTE_OPTIMUM, Portfolio, Start, portfolio

# With repeated blocks the starters get this share of the limits.
# NOTE: on GPT-96 (1,252 layers) the greedy needs 2-10 s; given half of a
# 4.5 s limit under load it starved the search and `blocks` lost to the
# standalone greedy.
STARTERS_SHARE_WITH_BLOCKS = 0.3
STRUCTURE_SHARE = 0.3  # of the time left, for finding the repeats (see structure_stop)
SECOND_START_SHARE = 0.5  # of the search's work and time, for the second start (two_starts)


def blocks(
    problem: Problem,
    *,
    rtol: float = 0.05,
    use_signatures: bool = True,
    window: int = 8,
    window_work: float = WINDOW_WORK,
    lower_bound: bool = True,
) -> SolverOutput:
    """Plan a net of repeated blocks by deciding each block once for a class of copies.

    `rtol`/`use_signatures`: how layers are compared (`planopt.find_blocks`).
    `window` (0: none) and `window_work`: the exact windows. `lower_bound`
    reports the LP relaxation's bound.
    """
    window, window_work = check_options(window, window_work)
    structure = find_blocks(
        problem.profile, rtol=rtol, use_signatures=use_signatures, stop=structure_stop(problem)
    )
    return plan_blocks(problem, structure, window, window_work, lower_bound)


def structure_stop(problem: Problem) -> Callable[[], bool]:
    """When the search for repeats must give up: past `STRUCTURE_SHARE` of the time left.

    NOTE: at 10^5 layers `find_blocks` takes seconds (a 5 s limit ran 8 s,
    most of it before any deadline was looked at); it gets a share of the
    time and the wall clock alone stops it, so a work-limited solve finds
    the same structure on any machine.
    """
    left = problem.time_left()
    if left is None:
        return lambda: False
    return problem.share(seconds=STRUCTURE_SHARE * left).out_of_time


def plan_blocks(
    problem: Problem,
    structure: BlockStructure,
    window: int,
    window_work: float,
    lower_bound: bool = True,
) -> SolverOutput:
    """`blocks` on a structure already found (`auto` finds it to choose its method)."""
    problem = bounded(problem)
    window_work = problem.meter.raw(window_work)
    bound = relaxation_lower_bound(problem) if lower_bound else None
    share = STARTERS_SHARE_WITH_BLOCKS if structure.found else 0.5
    starts = portfolio(problem, share=share, recompute_share=RECOMPUTE_SHARE)
    if starts.best is None:
        return starts.no_start("blocks")
    if not structure.found:
        phases = layer_phases(problem.n, window, window_work)
        detail = "no repeated blocks found; layer search"
    else:
        phases = block_phases(structure, window, window_work)
        detail = f"blocks {structure.summary()}"
    inc, report, start = two_starts(problem, starts, phases)
    return finish("blocks", inc, starts, report, bound, detail, start=start)


def second_start(starts: Portfolio) -> Start | None:
    """The fastest other start when the fastest is the recompute-only optimum (else None).

    NOTE: that plan is optimal among keep/recompute plans, so the moves around it
    find little. On GPT-2's traced block x48 with menus at 70% it (12.2% over
    T_ideal) beat pooch's plan (12.6%) as a start, and the search from it ended
    at 9.9% (5 units) and 8.6% (10 units); from pooch's, at 7.01% in 3 units.
    """
    best = starts.best
    if best is None or best.source != RECOMPUTE_OPTIMUM or len(starts.starts) < 2:
        return None
    return starts.starts[1]


def two_starts(
    problem: Problem, starts: Portfolio, phases: list[Phase]
) -> tuple[Incumbent, Report, Start]:
    """The search from the fastest start and, when that is the recompute-only optimum,
    from the next fastest (`second_start`) on `SECOND_START_SHARE` of the work and time left:
    the faster result (the first on a tie), its report and its start."""
    first = starts.best
    assert first is not None
    other = second_start(starts)
    if other is None:
        inc = Incumbent(problem, first.plan)
        return inc, search(inc, phases), first
    left = problem.time_left()
    keep = 1 - SECOND_START_SHARE
    part = problem.share(keep, seconds=None if left is None else keep * left)
    inc = Incumbent(part, first.plan)
    report = search(inc, phases)
    inc2 = Incumbent(problem, other.plan)
    report2 = search(inc2, phases)
    if Incumbent.better(inc2.key, inc.key):
        return inc2, report2, other
    return inc, report, first
