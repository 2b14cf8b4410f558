"""Method "lower-bound": the relaxation's proven bound, registered like any method.

It returns no plan, only `lower_bound` (status `bound`), so sweeps and the
known-answer bank treat the bound as one more registered method instead of
a special case. A work limit becomes HiGHS's node limit, so a work-limited
bound is the same on any machine.
"""

from __future__ import annotations

from planopt.problem import Problem
from planopt.result import SolverOutput, Status
from solvers.model.relaxation import relaxation_bound


def lower_bound(problem: Problem, *, relax: bool = False) -> SolverOutput:
    """A proven lower bound on the fastest plan's makespan (see `solvers.model.relaxation`)."""
    if not isinstance(relax, bool):
        from planopt.errors import SolverOptionError

        raise SolverOptionError(f"relax must be true or false, got {relax!r}")
    bound = relaxation_bound(
        problem.profile,
        problem.budget,
        time_limit=problem.time_left(),
        work_limit=problem.work_left(),
        relax=relax,
        meter=problem.meter,
    )
    if bound is None:
        return SolverOutput(
            None, Status.INFEASIBLE, None, "even the relaxation cannot fit the budget"
        )
    kind = "LP" if relax else "MIP"
    return SolverOutput(None, Status.BOUND, bound, f"{kind} relaxation's bound")
