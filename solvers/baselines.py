"""Baseline policies (placeholder; see issue 2)."""

from planopt.plan import Plan
from planopt.problem import Problem
from planopt.result import SolverOutput, Status


def keep_all(problem: Problem) -> SolverOutput:
    plan = Plan.keep_all(problem.profile)
    _, peak = problem.scorer.score_plan(plan)
    if not problem.fits(peak):
        return SolverOutput(None, Status.INFEASIBLE, message="keep-all needs more memory")
    return SolverOutput(plan, Status.FEASIBLE)
