"""HiGHS: running it through PuLP in one long-lived process, counting and limiting its work,
and the HiGHS back-end of the plan model.

NOTE (how HiGHS's work is counted): HiGHS has no deterministic time of its
own, and the limits it has do not bound its root: it ignored a
`simplex_iteration_limit` of 2,000 (10,339 iterations at the root of a
6-layer plan model), and a node limit cannot stop the root's cut rounds and
sub-MIPs (27 s at the root of GPT-48's relaxation, one node). But its MIP
solver calls the interrupt callback at fixed points of its search (130
calls in both of two runs of that root), and each call reports the node
count. So a MIP's work is charged per callback, by the model's size:
`ROOT_UNITS_PER_NONZERO` per nonzero of the matrix per callback while at the
root (a cut round or a heuristic over the whole model), and
`NODE_UNITS_PER_NONZERO` per nonzero per node explored; the solve is
interrupted at the first callback past its work limit. The counts, and so
where it stops, are the same on any machine. A pure LP is limited by its
simplex iterations (which HiGHS obeys for LPs), `LP_UNITS_PER_ITERATION` each.
(The relaxation's MIP, method `lower-bound`, is counted finer, by the LP
iterations HiGHS reports at each callback: `solvers.model.relaxation_mip`.)
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import highspy
import pulp

from solvers.backends.base import BackendResult, Status
from solvers.backends.linear import INTEGRALITY_TOLERANCE, build_lp, read_solution

if TYPE_CHECKING:
    from planopt.work import WorkMeter
    from solvers.model import Formulation

# Rates fitted to the CPU time of 16 MIP solves (plan models of 4-7 layers,
# relaxations of 21-316 layers) and 10 LPs on the reference machine; every
# solve's time was within 0.44x-2.1x of the fit (docs/solvers.md).
ROOT_UNITS_PER_NONZERO = 2.4e-6
NODE_UNITS_PER_NONZERO = 2.0e-7
LP_UNITS_PER_ITERATION = 5.0e-5

# Model statuses of a solve stopped by a limit: it may hold a plan, or none.
_STOPPED = (
    highspy.HighsModelStatus.kSolutionLimit,
    highspy.HighsModelStatus.kInterrupt,
    highspy.HighsModelStatus.kTimeLimit,
    highspy.HighsModelStatus.kIterationLimit,
)


@dataclass
class WorkCounter:
    """HiGHS's work on one model, counted at its interrupt callbacks (see the module NOTE)."""

    nonzeros: int
    limit: float | None = None
    root_calls: int = 0
    nodes: int = 0
    interrupted: bool = False

    def units(self) -> float:
        return self.nonzeros * (
            ROOT_UNITS_PER_NONZERO * self.root_calls + NODE_UNITS_PER_NONZERO * self.nodes
        )

    def on_interrupt_callback(self, event) -> None:
        nodes = int(event.data_out.mip_node_count)
        if nodes <= 0:
            self.root_calls += 1
        self.nodes = max(self.nodes, nodes)
        if self.limit is not None and self.units() >= self.limit:
            self.interrupted = True
            event.interrupt()


class _HiGHS(pulp.HiGHS):
    """PuLP's HiGHS interface with a work limit, reading solves stopped by any limit.

    NOTE: PuLP 3.3 maps HiGHS's model statuses through a table that lacks
    `kSolutionLimit` (it raises KeyError) and reads an interrupted solve as
    holding a solution even when it has none; both are read here.
    """

    def __init__(self, work_limit: float | None = None, **options) -> None:
        super().__init__(**options)
        self.work_limit = work_limit
        self.counter: WorkCounter | None = None

    def callSolver(self, lp):
        model = lp.solverModel
        self.counter = WorkCounter(int(model.getNumNz()), self.work_limit)
        model.cbMipInterrupt += self.counter.on_interrupt_callback
        if self.work_limit is not None:
            iterations = max(1, math.floor(self.work_limit / LP_UNITS_PER_ITERATION))
            model.setOptionValue("simplex_iteration_limit", iterations)  # obeyed by LPs only
        super().callSolver(lp)

    def findSolutionValues(self, lp):
        model = lp.solverModel
        if model.getModelStatus() not in _STOPPED:
            return super().findSolutionValues(lp)
        # NOTE: `col_value` builds a new list on every access: read it once (read per
        # variable it made this loop quadratic, 4.9 s of a 1,000-layer bound).
        values = model.getSolution().col_value
        for var in lp.variables():
            var.varValue = values[var.index]
        if model.getInfo().primal_solution_status == 2:  # kSolutionStatusFeasible
            return pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible
        return pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound

    def work(self, lp) -> float:
        """The work units this solve of `lp` spent."""
        info = lp.solverModel.getInfo()
        if self.counter is not None and int(info.mip_node_count) >= 0:  # a MIP
            return self.counter.units()
        return max(0, int(info.simplex_iteration_count)) * LP_UNITS_PER_ITERATION


def fresh_thread_pool() -> None:
    """Reset HiGHS's per-process thread scheduler (see `solve_with_highs`)."""
    highspy.Highs.resetGlobalScheduler(True)


def solve_with_highs(
    prob: pulp.LpProblem, *, work_limit: float | None = None, **options
) -> pulp.HiGHS:
    """Solve `prob` with PuLP's HiGHS interface, within `work_limit` units where given;
    returns the solver object (its `work(prob)` is the work spent).

    NOTE: HiGHS sizes one global thread scheduler per process on its first
    solve; a later solve asking for another thread count then fails at once
    ("Not Solved"), which made an exact HiGHS solve after a lower-bound solve
    report no answer. Resetting the scheduler first keeps solves independent.
    """
    fresh_thread_pool()
    options.setdefault("msg", False)
    solver = _HiGHS(work_limit, **options)
    prob.solve(solver)
    return solver


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
    """The plan model with HiGHS's MIP solver, single-threaded (see `solvers.backends`)."""
    if form.model.capacity < 0:
        return BackendResult(Status.INFEASIBLE, note="the budget leaves no room for tensors")
    prob, xs = build_lp(form, hint, objective_at_most)
    started = time.monotonic()
    solver = solve_with_highs(
        prob,
        work_limit=work_limit,
        gapRel=relative_gap,
        timeLimit=time_limit,
        threads=1,
        random_seed=seed,
        mip_feasibility_tolerance=INTEGRALITY_TOLERANCE,
        # NOTE (measured over random ruled 4-layer chains, brute force the judge):
        # at this integrality tolerance, below HiGHS's LP feasibility tolerance
        # (1e-7), HiGHS 1.14 sometimes prunes the optimum: "optimal" 1.4-128% above
        # it, or "infeasible" under a plan that fits. With presolve and cuts at
        # their defaults it did on the chains of tests/test_exact_highs_floor.py;
        # presolve off, 7 wrong in 3,308 solves; presolve on with cuts kept out of
        # the LP (below), 5 in 3,308, and right on those chains. At HiGHS's own
        # tolerance (1e-6) none of 4,339 tiny chains was wrong, but the memory rows
        # (bytes over their gcd, up to ~1e9) then loosen by ~1e3 bytes and the
        # plans of real-sized chains (tests/test_bank.py) break the budget. So HiGHS
        # is the cross-check, CP-SAT (exact in integers) the reference.
        presolve="on",
        mip_lp_age_limit=0,
        mip_pool_soft_limit=0,
    )
    work = solver.work(prob)
    if meter is not None:
        meter.charge(work)
    result = read_solution(form, prob, xs)
    note = ""
    if result.status in (Status.FEASIBLE, Status.UNKNOWN):
        if solver.counter is not None and solver.counter.interrupted:
            note = "stopped by its work limit"
        elif time_limit is not None and time.monotonic() - started >= time_limit:
            note = "stopped by its time limit"
    bound = result.bound
    if result.status is Status.FEASIBLE:
        dual = prob.solverModel.getInfo().mip_dual_bound
        if math.isfinite(dual):
            bound = dual * form.times.ticks_per_linear_unit
    return BackendResult(result.status, result.values, result.objective, bound, work, note)
