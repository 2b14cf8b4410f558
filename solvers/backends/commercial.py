"""Gurobi and CPLEX on the plan model, through PuLP, where they are installed.

Both limit work deterministically in their own units: Gurobi's `WorkLimit`
(work units of about a second, taken 1:1) and CPLEX's deterministic time
(`dettimelimit`, in ticks; `CPLEX_TICKS_PER_UNIT` to a work unit, the
vendor's figure of about a millisecond a tick). Both default to a
deterministic parallel mode. Neither is installed on the reference
machine: these paths are untested here, and their records say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pulp

from solvers.backends.base import BackendResult, Status
from solvers.backends.linear import build_lp, read_solution

if TYPE_CHECKING:
    from planopt.work import WorkMeter
    from solvers.model import Formulation

CPLEX_TICKS_PER_UNIT = 1000.0


def _finish(form, prob, xs, work: float, meter) -> BackendResult:
    if meter is not None:
        meter.charge(work)
    result = read_solution(form, prob, xs)
    return BackendResult(result.status, result.values, result.objective, result.bound, work)


def solve_gurobi(
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
    if form.model.capacity < 0:
        return BackendResult(Status.INFEASIBLE)
    prob, xs = build_lp(form, hint, objective_at_most)
    extra = {} if work_limit is None else {"WorkLimit": work_limit}
    solver = pulp.GUROBI(
        msg=False,
        gapRel=relative_gap,
        timeLimit=time_limit,
        warmStart=hint is not None,
        Threads=threads,
        Seed=seed,
        **extra,
    )
    prob.solve(solver)
    work = float(getattr(prob.solverModel, "Work", 0.0) or 0.0)
    return _finish(form, prob, xs, work, meter)


def solve_cplex(
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
    if form.model.capacity < 0:
        return BackendResult(Status.INFEASIBLE)
    prob, xs = build_lp(form, hint, objective_at_most)
    extra = {} if work_limit is None else {"dettimelimit": work_limit * CPLEX_TICKS_PER_UNIT}
    solver = pulp.CPLEX_PY(
        msg=False,
        gapRel=relative_gap,
        timeLimit=time_limit,
        warmStart=hint is not None,
        threads=threads,
        **extra,
    )
    prob.solve(solver)
    # A fresh CPLEX object per solve: its deterministic clock counts this solve only.
    ticks = float(prob.solverModel.get_dettime())
    return _finish(form, prob, xs, ticks / CPLEX_TICKS_PER_UNIT, meter)
