"""The certificate a search reports: the relaxation's lower bound on its own share of the limits."""

from __future__ import annotations

from planopt.certificate import Certificate
from planopt.problem import Problem

# The bound's own share of the solve's limits (work and time), reserved before
# the search starts. It is charged only what it spends: the LP relaxation
# (`solvers.model.relaxation_highs`: about 0.75 units on a 628-layer decoder,
# 1.2 on 1,000 layers, 2.4 on 2,000) within it, the MIP only on request.
# NOTE: the share used to be a tenth of whatever the starters left, and the
# PuLP build alone cost 3 ms a layer: under a 5 s limit a 628-layer decoder
# got no bound at all (T_ideal, a certified gap of 3.1% at 50% for a plan
# within 0.05% of its 30 s bound).
BOUND_SHARE = 0.35


def relaxation_lower_bound(
    problem: Problem, share: float = BOUND_SHARE, *, relax: bool = True
) -> tuple[float | None, Certificate]:
    """The relaxation's bound (`planopt.lower_bound`, as an LP by default) and its
    certificate, on `share` of the problem's work and time limits; T_ideal when the
    share cannot cover the LP; None when even the relaxation cannot fit. Over menus
    (cost model v3) the relaxation has one action per option, so its bound holds
    for plans that take options too.

    The share is of the limits themselves, not of what is left, so the bound's
    strength does not depend on what ran before it.
    """
    from solvers.model.relaxation_highs import highs_bound

    limit = problem.meter.limit
    work = None if limit is None else share * limit
    left = problem.work_left()
    if left is not None:
        work = left if work is None else min(work, left)
    seconds = None
    if problem.time_limit is not None:
        seconds = share * problem.time_limit
    left_seconds = problem.time_left()
    if left_seconds is not None:
        seconds = left_seconds if seconds is None else min(seconds, left_seconds)
    return highs_bound(
        problem.profile,
        problem.budget,
        time_limit=seconds,
        work_limit=work,
        mip=not relax,
        meter=problem.meter,
    )
