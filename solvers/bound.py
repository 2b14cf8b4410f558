"""Method "lower-bound": the relaxation's proven bound, registered like any method.

It returns no plan, only `lower_bound` (status `bound`) and its certificate,
so sweeps and the known-answer bank treat the bound as one more registered
method instead of a special case. The LP relaxation is solved first; unless
`relax`, the MIP then runs on the work and time left, cut short by them. A
work limit stops HiGHS at a point its work counter fixes, so a work-limited
bound is the same on any machine.
"""

from __future__ import annotations

from planopt.problem import Problem
from planopt.result import SolverOutput, Status
from solvers.model.relaxation_highs import highs_bound


def lower_bound(problem: Problem, *, relax: bool = False) -> SolverOutput:
    """A proven lower bound on the fastest plan's makespan (see `solvers.model.relaxation`)."""
    if not isinstance(relax, bool):
        from planopt.errors import SolverOptionError

        raise SolverOptionError(f"relax must be true or false, got {relax!r}")
    bound, certificate = highs_bound(
        problem.profile,
        problem.budget,
        time_limit=problem.time_left(),
        work_limit=problem.work_left(),
        mip=not relax,
        meter=problem.meter,
    )
    if bound is None:
        return SolverOutput(
            None,
            Status.INFEASIBLE,
            None,
            "even the relaxation cannot fit the budget",
            certificate=certificate,
        )
    return SolverOutput(None, Status.BOUND, bound, f"{certificate.detail}", certificate=certificate)
