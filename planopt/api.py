"""The public entry points: `solve`, `simulate`, budgets.

`solve` is the only door to the solvers: it validates the request, enforces
the time limit's bookkeeping, and re-scores every returned plan with the
simulator, so a method can never report a figure the cost model disagrees
with.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from planopt import registry
from planopt.budget import min_budget, min_memory_plan, parse_budget
from planopt.bundled import resolve_profile
from planopt.certificate import METHOD, OPTIMUM, T_IDEAL, Certificate
from planopt.errors import InvalidPlanError, SolverOptionError, UnknownMethodError, show
from planopt.option_types import check_option_types
from planopt.problem import Problem
from planopt.profile import Profile
from planopt.result import Solution, SolverOutput, Status
from planopt.work import WorkMeter, check_work_limit, method_rate

# A plan within this relative distance of T_ideal is optimal: no plan is faster.
_IDEAL_TOLERANCE = 1e-12
# NOTE (the limit covers the whole call): after the method stops, its plan is
# built and re-simulated (`_finish`). Measured first at 1.8e-5 s a layer (10^5
# layers: 0.5 s building, 1.25 s simulating); since the build no longer formats
# messages and the fingerprint is hashed before the method, 3-4e-6 s a layer
# of CPU (10^5: 0.3 s; 10^6: 0.6 s building, 3.3 s checking and simulating, on
# a quiet machine). The method's deadline keeps back 1e-5 s a layer (at most
# half the limit): room for a 2.5x slower (shared) machine, while at 10^6
# layers a 30 s limit still leaves the greedy time for its first plan.
FINISH_SECONDS_PER_LAYER = 1e-5


def check_time_limit(time_limit: float | None) -> float | None:
    """A time limit must be None or a finite number of seconds > 0."""
    if time_limit is None:
        return None
    if (
        isinstance(time_limit, bool)
        or not isinstance(time_limit, int | float)
        or not (math.isfinite(time_limit) and time_limit > 0)
    ):
        raise SolverOptionError(
            f"time_limit must be a finite number of seconds > 0, got {show(time_limit)}"
        )
    return float(time_limit)


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SolverOptionError(f"seed must be an integer >= 0, got {show(seed)}")
    return seed


def solve(
    profile: Profile | str,
    budget: float | int | str,
    method: str = "greedy",
    *,
    time_limit: float | None = None,
    work_limit: float | None = None,
    seed: int = 0,
    **options,
) -> Solution:
    """Plan `profile` for `budget` (bytes, `"12GiB"` or `"50%"`) with `method`.

    `profile` is a `Profile`, a bundled profile's name or a profile file.
    Returns a `Solution` whose schedule comes from the simulator. A budget
    below `min_budget(profile)` gives status `infeasible` with the minimum
    in the message and `Solution.min_budget`, without running the method.
    `work_limit` (work units, see `planopt.work`) stops a search at the same
    point on any machine; `time_limit` (seconds) is a wall-clock guard on
    top. With no binding time limit, the same inputs, seed and work limit
    give the same plan.
    """
    # NOTE: the limit counts from here, so the minimum budget and the budget's own
    # arithmetic are inside it (10^5 layers: seconds before any method starts).
    started = time.monotonic()
    profile = resolve_profile(profile)
    bytes_budget = parse_budget(budget, profile)
    limit = check_time_limit(time_limit)
    work = check_work_limit(work_limit)
    seed = _check_seed(seed)
    if not isinstance(method, str):
        raise UnknownMethodError(f"method must be a method name (a string), got {show(method)}")
    spec = registry.get(method)
    fn = spec.load()
    spec.check_options(options)
    check_option_types(spec.name, fn, options)
    spec.check_profile(profile)
    minimum = min_budget(profile)
    if bytes_budget < minimum:
        exact, upper = _min_budget_known(profile, minimum, None)
        return Solution(
            plan=None,
            schedule=None,
            status=Status.INFEASIBLE,
            method=spec.name,
            budget=bytes_budget,
            lower_bound=None,
            solve_seconds=0.0,
            min_budget=minimum,
            work_limit=work,
            message=(
                f"budget must be at least {minimum} bytes (no plan for {profile.name!r} "
                f"needs less), got {bytes_budget:.0f}"
            ),
            min_budget_exact=exact,
            min_budget_upper=upper,
        )
    # NOTE: every returned plan carries the profile's fingerprint, hashed once per
    # profile (2.4 s at 10^6 layers); hashed here it is inside the method's share
    # of the limit, not after the method's deadline in the time kept for `_finish`.
    _ = profile.fingerprint
    problem = Problem(
        profile=profile,
        budget=bytes_budget,
        min_budget=minimum,
        seed=seed,
        time_limit=limit,
        deadline=None if limit is None else started + limit - _finish_reserve(limit, profile),
        work_limit=work,
        meter=WorkMeter.calibrated(work, method_rate(spec.name, len(profile.layers))),
    )
    out: SolverOutput = fn(problem, **options)
    elapsed = time.monotonic() - started
    return _finish(problem, spec.name, out, elapsed)


def _finish_reserve(limit: float, profile: Profile) -> float:
    """Seconds of the limit kept back for `_finish` (see FINISH_SECONDS_PER_LAYER)."""
    return min(limit / 2, FINISH_SECONDS_PER_LAYER * len(profile.layers))


def _finish(problem: Problem, method: str, out: SolverOutput, elapsed: float) -> Solution:
    """Re-score the method's plan with the simulator and settle the status."""
    profile = problem.profile
    status, lower, message = out.status, out.lower_bound, out.message
    provenance = out.certificate
    if provenance is not None:  # its work in the method's raw counts, reported in units
        provenance = replace(provenance, work=provenance.work * problem.meter.rate)
    schedule = None
    plan = out.plan
    if plan is not None:
        if plan.profile is None or plan.names is None:
            plan = plan.for_profile(profile)
        # `simulate`'s own steps on the request's scorer (built once per solve:
        # 0.7 s at 10^5 layers, all of it after the deadline when built here).
        plan.check(profile)
        schedule = problem.base_scorer.schedule(plan, problem.budget)
        if not schedule.feasible:
            if status in (Status.OPTIMAL, Status.FEASIBLE):
                raise InvalidPlanError(
                    f"method {method!r} returned a plan whose simulated peak "
                    f"{schedule.peak_bytes} exceeds the budget {problem.budget:.0f}: a solver bug"
                )
        elif schedule.makespan <= profile.t_ideal * (1 + _IDEAL_TOLERANCE):
            status, lower = Status.OPTIMAL, profile.t_ideal
            provenance = Certificate(T_IDEAL, True, detail="the plan runs at T_ideal")
    exact = upper = None
    if plan is None and status is not Status.BOUND:
        exact, upper = _min_budget_known(profile, problem.min_budget, problem.base_scorer)
        if status in (Status.NO_PLAN, Status.TIMEOUT):
            message = f"{message}; {_minimum_note(problem.min_budget, exact, upper)}"
    return Solution(
        plan=plan,
        schedule=schedule,
        status=status,
        method=method,
        budget=problem.budget,
        lower_bound=lower,
        solve_seconds=elapsed,
        min_budget=problem.min_budget,
        message=message,
        work_limit=problem.work_limit,
        work_used=problem.meter.units_used(),
        bound_provenance=_provenance(provenance, status, lower),
        min_budget_exact=exact,
        min_budget_upper=upper,
    )


def _min_budget_known(profile: Profile, minimum: int, scorer) -> tuple[bool, int]:
    """`(exact, upper)`: whether `minimum` is the smallest budget any plan meets, and the
    peak of the minimum-memory plan (a budget some plan certainly meets).

    NOTE: one simulation (10^5 layers: 0.5 s), so only for solves that return no
    plan, where the minimum is what the answer has to say.
    """
    from planopt.simulate import Scorer

    peak = (scorer or Scorer(profile)).score_plan(min_memory_plan(profile))[1]
    return peak == minimum, peak


def _minimum_note(minimum: int, exact: bool, upper: int) -> str:
    """What a `no plan found` or `timeout` answer knows of the smallest budget any plan
    meets."""
    if exact:
        return f"the smallest budget any plan meets is {minimum} bytes (proven)"
    return (
        f"the smallest budget any plan meets is at least {minimum} bytes (proven) and at "
        f"most {upper} bytes (the minimum-memory plan's peak)"
    )


def _provenance(
    certificate: Certificate | None, status: Status, lower: float | None
) -> Certificate | None:
    """The method's certificate, else what its status says of its bound."""
    if lower is None:
        return None
    if certificate is not None:
        return certificate
    if status is Status.OPTIMAL:
        return Certificate(OPTIMUM, True, detail="the method proved its plan optimal")
    return Certificate(METHOD, False, detail="the method's own bound, no provenance given")


def lower_bound(
    profile: Profile | str,
    budget: float | int | str,
    *,
    time_limit: float | None = 10.0,
    relax: bool = False,
) -> float | None:
    """A proven lower bound (seconds) on the fastest plan's makespan at `budget`.

    Cheap at any size: a relaxation of the cost model over the actions alone
    (see `solvers.model.relaxation`), solved as a small MIP (its proven bound if the
    time limit cuts it short) or, with `relax=True`, as an LP. Never below
    `T_ideal`. None when even the relaxation cannot fit the budget (then no
    plan can).
    """
    from solvers.model.relaxation import relaxation_bound

    profile = resolve_profile(profile)
    registry.get("lower-bound").check_profile(profile)
    bytes_budget = parse_budget(budget, profile)
    limit = check_time_limit(time_limit)
    if not isinstance(relax, bool):
        raise SolverOptionError(f"relax must be true or false, got {show(relax)}")
    if bytes_budget < min_budget(profile):
        return None
    return relaxation_bound(profile, bytes_budget, time_limit=limit, relax=relax)
