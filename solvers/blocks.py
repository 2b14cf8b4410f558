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
from solvers.search.driver import search
from solvers.search.engine import Incumbent
from solvers.search.repeats import block_phases
from solvers.search.starts import portfolio

# With repeated blocks the starters get this share of the limits.
# NOTE: on GPT-96 (1,252 layers) the greedy needs 2-10 s; given half of a
# 4.5 s limit under load it starved the search and `blocks` lost to the
# standalone greedy.
STARTERS_SHARE_WITH_BLOCKS = 0.3
STRUCTURE_SHARE = 0.3  # of the time left, for finding the repeats (see structure_stop)


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
    inc = Incumbent(problem, starts.best.plan)
    if not structure.found:
        report = search(inc, layer_phases(problem.n, window, window_work))
        detail = "no repeated blocks found; layer search"
    else:
        report = search(inc, block_phases(structure, window, window_work))
        detail = f"blocks {structure.summary()}"
    return finish("blocks", inc, starts, report, bound, detail)
