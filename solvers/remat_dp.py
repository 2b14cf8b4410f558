"""Method "remat-dp": the proven-optimal keep/recompute plan, by dynamic programming.

The space PyTorch's activation checkpointing, Checkmate and Rotor decide,
under cost model v2 in exact bytes, for every profile the spec allows
(`solvers.remat` holds the theorem, the bound and the search). Its plan is
also an upper bound on the joint optimum: `seed_joint` hands it to the
joint exact methods as a warm start (see its note). On a profile with
menus (cost model v3) each layer is kept whole, kept with one of its
options, or recomputed: `solvers.remat.menus` extends the theorem and
solves that space exactly by labels.

NOTE (anytime). Before the search the starts of its space run to the end
(the registry's starters of the space, sqrt-n and keep-all, by
`solvers.starters`' rule, and on chains the walk reads,
`reach.longest_runs`): a limit that stops the search returns the
fastest of them and the search's best, whichever is faster, `feasible`
with the root bound; `timeout` only when none fits. Before, gpt-12 at 70%
under the demo's 0.5 units returned `timeout` with no plan where sqrt-n
alone found one at 23.7% over T_ideal in 0.016 units.
"""

from __future__ import annotations

import dataclasses
import math

from planopt import registry
from planopt.plan import KEEP, Plan
from planopt.problem import Problem
from planopt.registry import Space, in_space
from planopt.result import SolverOutput, Status
from planopt.work import method_rate
from solvers.remat.certify import Certificate, certify
from solvers.remat.chain import ChainModel
from solvers.remat.floor import budget_floor
from solvers.remat.menu_optimum import solve_menu_room
from solvers.remat.menus import MenuChain
from solvers.remat.minpeak import min_peak
from solvers.remat.optimum import solve_room
from solvers.remat.pychain import PyChain
from solvers.remat.reach import REACH_MAX_LAYERS, longest_runs, reach
from solvers.remat.rule import room_cap
from solvers.remat.short import SHORT_LAYERS
from solvers.starters import charge_starters, may_start, starters_problem


def solve_certified(
    problem: Problem, *, starts: bool = True
) -> tuple[SolverOutput, Certificate | None]:
    """The method's answer and, when it has a plan, the certificate behind it.

    `starts=False` leaves out the starts (`seed_joint`: its caller has them).
    """
    profile = problem.profile
    if profile.has_options:
        return _solve_menus(problem), None
    floor = budget_floor(profile)
    if math.floor(problem.budget) < floor:  # far below the space's minimum: no model needed
        return _infeasible(problem, f"at least {floor} bytes (a lower bound from the layers)"), None
    room = room_cap(math.floor(problem.budget) - profile.static_bytes)
    charge, expired = problem.meter.charge, problem.expired
    walk = None
    if SHORT_LAYERS < len(profile.layers) <= REACH_MAX_LAYERS:
        chain = PyChain(profile)
        need = _unreachable(chain, room, charge, expired)
        if need is not None:
            return _infeasible(problem, need), None
        walk = longest_runs(chain, room) if room >= chain.pg_total else None
    # short chains: plain Python lists, numpy's call overheads would be most of the time
    model = PyChain(profile) if len(profile.layers) <= SHORT_LAYERS else ChainModel(profile)
    everything = tuple(range(model.n))
    if model.peak(list(everything)) - profile.static_bytes <= room:
        cert = certify(model, everything, proven=True, upper_saved=math.fsum(model.fwd))
        return _output(profile, cert, "keep-all fits: optimal without a search"), cert
    start = _best_start(problem, walk) if starts else None
    result = solve_room(model, max(room, -1), charge=charge, expired=expired)
    if start is not None and (result.found is None or not result.proven):
        kept = tuple(i for i, a in enumerate(start[0].actions) if a is KEEP)
        if result.found is None or result.found.saved < _saved(model, kept):
            # the search stopped before it found a plan as fast as the best start (a
            # proof that none fits, contradicted by a start that fits, bounds nothing)
            upper = math.inf if result.proven else result.upper
            cert = certify(model, kept, proven=False, upper_saved=upper)
            return _output(profile, cert, f"the best start, the {start[1]}"), cert
    if result.found is None:
        if not result.proven:
            return SolverOutput(
                None,
                Status.TIMEOUT,
                message="remat-dp: the limit came before any plan was proven to fit",
                stopped=True,
            ), None
        minimum = result.minimum or min_peak(model, charge=charge, expired=expired, above=room)
        need = (
            f"at least {minimum.peak} bytes"
            if minimum.proven
            else f"more than {minimum.lower} bytes"
        )
        return _infeasible(problem, need), None
    low = result.minimum.peak if result.minimum and result.minimum.proven else None
    cert = certify(
        model, result.found.kept, proven=result.proven, upper_saved=result.upper, min_budget=low
    )
    stats = result.stats
    detail = (
        f"{stats.labels} labels, widest front {stats.widest}, {result.searches} search(es)"
        if stats
        else "no search"
    )
    return _output(profile, cert, detail), cert


TARGET_SHARE = 0.5  # of the work and time left, for the menu search's caps (menu_optimum)


def _solve_menus(problem: Problem) -> SolverOutput:
    """The keep/option/recompute optimum of a profile with menus (`solvers.remat.menus`)."""
    profile = problem.profile
    chain = MenuChain(profile)
    room = room_cap(math.floor(problem.budget) - profile.static_bytes)
    # The whole-layer optimum (the v2 DP) is a plan of this space: the start
    # that caps the labels when the bound's targets do not settle it first
    # (`solvers.remat.menu_optimum`'s NOTE).
    bare = profile.replace_layers([dataclasses.replace(x, options=()) for x in profile.layers])

    def start() -> tuple[float, tuple[str, ...]] | None:
        whole, _ = solve_certified(dataclasses.replace(problem, profile=bare, base_scorer=None))
        if whole.plan is None:
            return None
        # optimal, or the best when the limit came: a start either way
        seconds = math.fsum(
            x.fwd for x, a in zip(bare.layers, whole.plan.actions, strict=True) if a == "recompute"
        )
        return seconds, tuple(a.value for a in whole.plan.actions)

    # the caps' searches get a share of the limits, the start the rest (menu_optimum)
    left = problem.time_left()
    part = problem.share(TARGET_SHARE, seconds=None if left is None else TARGET_SHARE * left)
    result, started = solve_menu_room(
        chain,
        room,
        start,
        charge=problem.meter.charge,
        expired=problem.expired,
        targets=(part.meter.charge, lambda: part.expired() or problem.expired()),
    )
    found = result.plan
    if found is None:
        if not result.proven:
            return SolverOutput(
                None,
                Status.TIMEOUT,
                message=(
                    "remat-dp: the limit (work, time, or the label cap of "
                    "solvers.remat.menu_search) came before the search over menus ended"
                ),
                stopped=True,
            )
        return SolverOutput(
            None,
            Status.INFEASIBLE,
            message=(
                f"remat-dp: no keep/option/recompute plan fits the budget "
                f"{problem.budget:.0f} bytes (swaps may still fit)"
            ),
        )
    plan = Plan.build(list(found.actions), profile=profile, options=list(found.options))
    partial = sum(1 for o in found.options if o is not None)
    if not result.proven:
        return SolverOutput(
            plan,
            Status.FEASIBLE,
            result.lower,
            message=(
                f"remat-dp: best plan over menus when the limit came ({partial} layer(s) "
                f"with an option; "
                + (
                    "the whole-layer plan is the start)"
                    if started
                    else "the search's best, no start asked for)"
                )
            ),
            stopped=True,
        )
    return SolverOutput(
        plan,
        Status.OPTIMAL,
        found.makespan,
        message=f"remat-dp: proven optimal over menus ({partial} layer(s) with an option)",
    )


def _best_start(problem: Problem, walk: tuple[int, ...] | None) -> tuple[Plan, str] | None:
    """The fastest start of the keep/recompute space that fits, and where it came from
    (see the module NOTE): the walk's plan and the registry's starters of the space."""
    candidates: list[tuple[Plan, str]] = []
    if walk is not None:
        kept = set(walk)
        actions = ["keep" if i in kept else "recompute" for i in range(problem.n)]
        candidates.append((Plan.build(actions, profile=problem.profile), "greedy walk's plan"))
    starters = starters_problem(problem)
    for name in registry.starters():
        spec = registry.get(name)
        if not may_start(spec.space, Space.RECOMPUTE_ONLY):
            continue
        if starters.out_of_time():
            break
        out = spec.load()(starters)
        if out.plan is not None and in_space(out.plan.actions, Space.RECOMPUTE_ONLY):
            candidates.append((out.plan, f"{name} plan"))
    charge_starters(problem, starters)
    best = None
    for plan, source in candidates:
        makespan, peak = problem.scorer.score_plan(plan)
        if problem.fits(peak) and (best is None or makespan < best[0]):
            best = (makespan, plan, source)
    return None if best is None else (best[1], best[2])


def _saved(model, kept: tuple[int, ...]) -> float:
    """The forward time a plan keeping `kept` saves (what the search maximises)."""
    return math.fsum(float(model.fwd[i]) for i in kept)


def _unreachable(model: PyChain, room: int, charge, expired) -> str | None:
    """What the space needs when no plan fits `room` (a long chain), else None.

    NOTE (why before the numpy model). On a long chain below the space's
    minimum the label search fails and `minpeak`'s numpy search follows
    (gpt-12 at 30%: 0.58 s), where `reach`'s exact label-free pass (any
    length) and `least_peak` from its bound answer in a few ms. The pass
    costs most at roomy budgets, so a greedy walk (`longest_runs`) asks
    first: when it finds a plan, nothing more runs. The minimum is exact,
    as `minpeak`'s is, so the answer is the one the search would give.
    """
    if room < model.pg_total or longest_runs(model, room) is not None:
        return None  # room < pg_total: `solve_room`'s first check answers at once
    kept, bound = reach(model, room)
    if kept is not None:
        return None
    above = room if bound == math.inf else int(bound) - 1  # no plan peaks at or below it
    minimum = min_peak(model, charge=charge, expired=expired, above=above)
    return f"at least {minimum.peak} bytes"


def _infeasible(problem: Problem, need: str) -> SolverOutput:
    return SolverOutput(
        None,
        Status.INFEASIBLE,
        message=(
            f"remat-dp: no keep/recompute plan fits the budget {problem.budget:.0f} bytes: "
            f"the recompute-only space needs {need} (swaps may still fit)"
        ),
    )


def _output(profile, cert: Certificate, detail: str) -> SolverOutput:
    kept = set(cert.kept)
    plan = Plan.build(
        [("keep" if i in kept else "recompute") for i in range(len(profile.layers))],
        profile=profile,
    )
    if cert.proven:
        return SolverOutput(
            plan, Status.OPTIMAL, cert.makespan, message=f"remat-dp: proven optimal ({detail})"
        )
    return SolverOutput(
        plan,
        Status.FEASIBLE,
        cert.lower_makespan,
        message=f"remat-dp: best plan when the limit came ({detail})",
        stopped=True,
    )


def remat_dp(problem: Problem) -> SolverOutput:
    """The fastest keep/recompute plan within the budget, proven optimal (see the module doc)."""
    return solve_certified(problem)[0]


def seed_joint(problem: Problem, *, share: float = 0.25) -> tuple[Plan, float] | None:
    """The recompute-only optimum as a warm start and upper bound for the joint search.

    NOTE (used by `exact` and `blocks`). Every keep/recompute plan is a joint
    plan, so its makespan bounds the joint optimum from above: the plan joins
    their starts, the incumbent the back-end is hinted with and whose
    makespan caps its objective. Given
    `share` of the work and time left; returns `(plan, makespan)`, or None
    when no keep/recompute plan fits or the share ran out first. It is not a
    registered starter: on transformer chains of 300-600 layers it takes
    seconds (experiments/results/remat_dp.md), more than a starter may.
    """
    left = problem.time_left()
    # Counted at the dynamic program's own rate (planopt.work): its labels are cheap.
    part = problem.share(
        share, seconds=None if left is None else share * left, rate=method_rate("remat-dp")
    )
    out = solve_certified(part, starts=False)[0]
    if out.plan is None:
        return None
    return out.plan, problem.scorer.score_plan(out.plan)[0]
