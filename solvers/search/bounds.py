"""The certificate a search reports: the relaxation's lower bound on a share of the limits."""

from __future__ import annotations

from planopt.problem import Problem

# What the LP relaxation costs to build and solve, in work units per layer
# (about 3 ms a layer on GPT-48/96, measured: building it in PuLP dominates).
LP_UNITS_PER_LAYER = 3e-3


def relaxation_lower_bound(
    problem: Problem, share: float = 0.1, *, cap: float | None = None, relax: bool = True
) -> float | None:
    """The relaxation's bound (`planopt.lower_bound`, as an LP by default) on `share`
    of the work and time left, at most `cap` units/seconds; T_ideal when that
    share cannot cover building it; None when even the relaxation cannot fit.

    NOTE: building the LP takes ~3 ms a layer whatever its limit (GPT-96, 1,252
    layers: 3.8 s to the bound); a share that cannot cover it gave only
    T_ideal and starved the search, so it says T_ideal at once. The decision
    is made on work units, so it is the same on every machine.
    """
    from solvers.model.relaxation import relaxation_bound

    cost = LP_UNITS_PER_LAYER * problem.n
    work = problem.work_left()
    if work is not None:
        allowed = share * work if cap is None else min(share * work, cap)
        if relax and allowed < cost:
            return problem.profile.t_ideal
    seconds = None
    left = problem.time_left()
    if left is not None:
        seconds = max(0.05, share * left if cap is None else min(share * left, cap))
        if relax and seconds < cost:
            return problem.profile.t_ideal
    problem.meter.charge(cost)
    return relaxation_bound(problem.profile, problem.budget, time_limit=seconds, relax=relax)
