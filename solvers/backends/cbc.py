"""CBC (bundled with PuLP) on the plan model: single-threaded, node-limited, watched.

Work is counted from CBC's log (enumerated nodes and simplex iterations, at
the rates below) and limited by `maxNodes`; CBC's own time limit is backed
by the watchdog (`solvers.backends.watchdog`), since CBC checks it only
between nodes. Importing this module does not import OR-Tools.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pulp

from solvers.backends.base import BackendResult, Status
from solvers.backends.linear import INTEGRALITY_TOLERANCE, build_lp, read_solution
from solvers.backends.watchdog import WALL_CLOCK, Clock, stop_children_after

if TYPE_CHECKING:
    from planopt.work import WorkMeter
    from solvers.model import Formulation

# Seconds CBC gets to write its plan after the watchdog's SIGINT, before SIGKILL.
CBC_KILL_AFTER = 2.0
# Work units per simplex iteration and per node: the CPU time of 8 solves of
# 4-8-layer plan models on the reference machine was within 0.55x-1.5x of
# this count (docs/solvers.md). A node with its iterations cost 0.03 units
# (median; 0.023-0.27): the node limit of a work limit.
UNITS_PER_ITERATION = 1.2e-4
UNITS_PER_NODE = 5.0e-3
UNITS_PER_NODE_WITH_ITERATIONS = 0.03
# What the watchdog waits on (tests drive it with a clock of their own).
CLOCK: Clock = WALL_CLOCK


def cbc_kill_after(time_limit: float) -> float:
    """Seconds between the watchdog's SIGINT and SIGKILL, so that a solve ends
    within its limit's 10% (and 0.25 s) even when CBC ignores the SIGINT."""
    return min(CBC_KILL_AFTER, 0.05 * time_limit + 0.25)


def node_limit(work_limit: float | None) -> int | None:
    """`maxNodes` for a work limit (CBC's root cut loop is not limited by it)."""
    if work_limit is None:
        return None
    return max(1, math.floor(work_limit / UNITS_PER_NODE_WITH_ITERATIONS))


def work_in_log(text: str) -> float:
    """The work CBC's log reports (nodes and iterations; 0 when it says nothing)."""
    nodes = re.findall(r"Enumerated nodes:\s+(\d+)", text)
    iterations = re.findall(r"Total iterations:\s+(\d+)", text)
    return (int(iterations[-1]) if iterations else 0) * UNITS_PER_ITERATION + (
        int(nodes[-1]) if nodes else 0
    ) * UNITS_PER_NODE


def stopped_inside(text: str) -> bool:
    """Whether a search inside CBC stopped at the node limit or lost its plan.

    NOTE: after fixing variables at the root, CBC 2.10.3 restarts its search
    on the smaller model. When that inner search stops at `maxNodes`
    ("Partial search"), or finds a better plan the outer search then drops
    (two "Search completed" lines, the inner one lower), the outer search
    still logs "Optimal solution found" (or "infeasible" when it has no
    plan). Such claims were 2-57% above the brute-force optimum, or
    "infeasible" under a plan that fits, at every tolerance tried
    (docs/solvers.md).
    """
    if "Partial search" in text or "Exiting on maximum nodes" in text:
        return True
    done = [float(x) for x in re.findall(r"Search completed - best objective ([-0-9.e+]+)", text)]
    return len(done) > 1 and min(done) < done[-1] - 1e-9 * max(1.0, abs(done[-1]))


def _unproven(result: BackendResult) -> BackendResult:
    """A claim of a search that stopped early: its plan, with no proof."""
    if result.status is Status.OPTIMAL:
        return BackendResult(Status.FEASIBLE, result.values, result.objective, None)
    if result.status is Status.INFEASIBLE:
        return BackendResult(Status.UNKNOWN)
    return result


def solve(
    form: Formulation,
    *,
    time_limit: float | None,
    work_limit: float | None,
    threads: int,
    seed: int,
    hint: Sequence[int] | None,
    objective_at_most: int | None = None,
    relative_gap: float = 0.0,
    meter: WorkMeter | None = None,
) -> BackendResult:
    """The plan model with CBC (see `solvers.backends.base.SolveFn`); `threads` is ignored.

    NOTE: CBC runs single-threaded whatever `threads` says. With 2 threads it
    once claimed as optimal a plan 4.5% slower than one CP-SAT, HiGHS and a
    single-threaded CBC all found (a 6-layer chain, seed 1000 at 50%), and
    its parallel search is not reproducible run to run.
    """
    if form.model.capacity < 0:
        return BackendResult(Status.INFEASIBLE, note="the budget leaves no room for tensors")
    prob, xs = build_lp(form, hint, objective_at_most)
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "cbc.log")
        solver = pulp.PULP_CBC_CMD(
            msg=False,
            gapRel=relative_gap,
            timeLimit=time_limit,
            maxNodes=node_limit(work_limit),
            warmStart=hint is not None,
            # NOTE: CBC's preprocessing wrongly declares some of these models
            # infeasible (seen on 2-layer chains HiGHS and CP-SAT solve), so it is
            # off. Measured against brute force (docs/solvers.md): with it on, at
            # CBC's default tolerance, 4 of 11 chains were answered wrongly even
            # with `stopped_inside`; at 1e-7 without it 1, at 1e-6 9, at 1e-9 none.
            options=[
                f"randomCbcSeed {seed + 1}",
                f"integerTolerance {INTEGRALITY_TOLERANCE}",
                "preprocess off",
            ],
            logPath=log,
        )
        kill_after = CBC_KILL_AFTER if time_limit is None else cbc_kill_after(time_limit)
        with stop_children_after("cbc", time_limit, kill_after=kill_after, clock=CLOCK) as watch:
            try:
                prob.solve(solver)
                crashed = False
            except pulp.PulpSolverError:
                if not watch.sent:
                    raise
                crashed = True  # stopped by the watchdog before it wrote a plan
        text = ""
        with contextlib.suppress(OSError), open(log) as handle:
            text = handle.read()
    work = work_in_log(text)
    if meter is not None:
        meter.charge(work)
    stopped = "stopped by the watchdog at its time limit" if watch.sent else ""
    if signal.SIGKILL in watch.sent:
        stopped += " (killed: it ignored SIGINT)"
    if crashed:
        return BackendResult(Status.UNKNOWN, work_used=work, note=stopped)
    result = read_solution(form, prob, xs)
    if stopped_inside(text):
        result = _unproven(result)
    bound = result.bound
    if result.status is Status.FEASIBLE:
        found = re.findall(r"best possible ([-0-9.e+]+)", text)
        if found:
            bound = float(found[-1]) * form.times.ticks_per_linear_unit
    if not stopped and result.status in (Status.FEASIBLE, Status.UNKNOWN):
        if "Stopped on node limit" in text or stopped_inside(text):
            stopped = "stopped by its work limit"
        elif "Stopped on time" in text:
            stopped = "stopped by its time limit"
    return BackendResult(result.status, result.values, result.objective, bound, work, stopped)
