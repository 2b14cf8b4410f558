"""Running HiGHS through PuLP safely inside one long-lived process."""

from __future__ import annotations

import highspy
import pulp


def fresh_thread_pool() -> None:
    """Reset HiGHS's per-process thread scheduler (see `solve_with_highs`)."""
    highspy.Highs.resetGlobalScheduler(True)


def solve_with_highs(prob: pulp.LpProblem, **options) -> pulp.HiGHS:
    """Solve `prob` with PuLP's HiGHS interface; returns the solver object.

    NOTE: HiGHS sizes one global thread scheduler per process on its first
    solve; a later solve asking for another thread count then fails at once
    ("Not Solved"), which made an exact HiGHS solve after a lower-bound solve
    report no answer. Resetting the scheduler first keeps solves independent.
    """
    fresh_thread_pool()
    solver = pulp.HiGHS(msg=False, **options)
    prob.solve(solver)
    return solver
