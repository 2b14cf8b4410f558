"""Exact methods: the whole plan space and its restricted variants, on any back-end.

A composition of the tiers below, every step limited in work units
(`planopt.work`):

1. starting plans (`_warm_starts`; for the joint space also the
   recompute-only optimum, `_recompute_only_start`): the fastest that fits
   is the incumbent, and the answer is never slower than it;
2. the relaxation's bound (`solvers.model.relaxation`): a start that meets
   it is optimal at once;
3. the polish (`_polish`, the search tier) on nets of 17 layers or more;
4. the plan model (`solvers.model`) with a floor at the bound, a probe at
   the bound (back-ends that take an objective cap), then the back-end
   (`solvers.exact_search`: one call on the work left; work slices that
   double, each with the next seed, where `RESTART_MAX_SLICES` > 1).

The plan read back is re-scored in floating point, and the lower bound
accounts for the model's time rounding.

NOTE (determinism): with a work limit and no binding time limit every step
is a function of the inputs, the seed and the work limit: shares are of
the work left, the back-ends get work limits, and the search runs the
back-end's deterministic thread count (CP-SAT: one worker). Racing threads
(`threads` > 1 with CP-SAT) are used only by a solve with a time limit and
no work limit, whose result depends on the clock anyway; its message says
so.
"""

from __future__ import annotations

from collections.abc import Sequence

from planopt import registry
from planopt.budget import min_memory_plan
from planopt.errors import SolverOptionError
from planopt.plan import KEEP, RECOMPUTE, SWAP, Action, Plan
from planopt.problem import Problem
from planopt.registry import Role
from planopt.result import SolverOutput, Status
from solvers import backends
from solvers.exact_search import (
    OPTIMALITY_GAP,
    add_objective_floor,
    affordable,
    charge_hint,
    charge_model,
    finish,
    probe_relaxation_bound,
    search,
    search_threads,
    work_share,
)
from solvers.model import build, evaluate
from solvers.starters import charge_starters, starters_problem
from solvers.swap_start import swap_start

ALL_ACTIONS: tuple[Action, ...] = (KEEP, SWAP, RECOMPUTE)
# The keep/swap greedy's work cap as a start of the keep/swap space: 0.01-0.05
# units on the 14-21-layer bundled nets, 13-44 on the 162-layer BERT (then it
# gives nothing and the other starts remain).
SWAP_START_WORK = 1.0
# The model has O(L^2) variables; past this many layers building it alone
# takes longer than users expect of a time limit.
DEFAULT_MAX_LAYERS = 200
# The recompute-only optimum (remat-dp) as a start for the joint space: this
# share of the work left.
RECOMPUTE_START_SHARE = 0.1
# The relaxation bound gets this share of the work left, at most RELAXATION_WORK.
RELAXATION_SHARE = 0.1
RELAXATION_WORK = 5.0
# The warm start is polished by the search tier (see `_polish`) on nets of at
# least POLISH_FROM_LAYERS layers, for POLISH_SHARE of the work left, at most
# POLISH_WORK units, with exact windows of POLISH_WINDOW layers.
# NOTE: 17, not 16: on 16-layer v2 chains the polish cost more than it saved
# (experiments/results/exact_ablation.md: median 0.5 units to proof with it,
# 0.2 without); the back-end finds those optima at once.
POLISH_FROM_LAYERS = 17
POLISH_SHARE = 0.15
POLISH_WORK = 3.0
POLISH_WINDOW = 8
POLISH_WINDOW_WORK = 2.0
# NOTE: the polish pays where it meets the relaxation's bound at once; on the
# 32-layer chains it did not, and more patience bought nothing that CP-SAT
# did not find anyway.
POLISH_PATIENCE = 1.0  # work units without a better plan before the polish gives up


def _check_threads(threads: int) -> int:
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise SolverOptionError(f"threads must be an integer >= 1, got {threads!r}")
    return threads


def _check_size(problem: Problem, max_layers: int) -> None:
    if isinstance(max_layers, bool) or not isinstance(max_layers, int) or max_layers < 1:
        raise SolverOptionError(f"max_layers must be an integer >= 1, got {max_layers!r}")
    if problem.n > max_layers:
        raise SolverOptionError(
            f"method 'exact': the net must have at most max_layers={max_layers} layers (the "
            f"model grows with L^2), got {problem.n}; to allow it pass max_layers={problem.n} "
            f"to planopt.solve (--option max_layers={problem.n} on the command line), or plan a "
            f"net this size with method 'lns' or 'auto' (--method lns) and bound its optimum "
            f"with method 'lower-bound'"
        )


def _warm_starts(problem: Problem, actions: Sequence[Action], given: Plan | None) -> list[Plan]:
    """Starting plans inside the action set: the caller's, every registered baseline's and
    the greedy's, the minimum-memory plan (it fits any budget >= min_budget), and for the
    keep/swap space the keep/swap greedy (`solvers.swap_start`, on at most
    `SWAP_START_WORK` units: the greedy's plan recomputes, so it is seldom of that space).

    NOTE: the seam the shared starts portfolio (`solvers.search.starts`)
    replaces. `problem` is the starters' request (`solvers.search.starts.starters_problem`:
    the one starters' rule, their own work cap past a smaller limit).
    """
    plans: list[Plan] = []
    if given is not None:
        plans.append(given.for_profile(problem.profile))
    for name in [*registry.by_role(Role.BASELINE), "greedy"]:
        if problem.out_of_time():
            break  # 10^4 layers: seconds per starter; the minimum-memory plan still comes
        plan = registry.get(name).load()(problem).plan
        if plan is not None:
            plans.append(plan)
    plans.append(min_memory_plan(problem.profile))
    allowed = set(actions)
    if allowed == {KEEP, SWAP} and not problem.out_of_time():
        plan = swap_start(problem.share(work_cap=SWAP_START_WORK))
        if plan is not None:
            plans.append(plan)
    return [p for p in plans if all(a in allowed for a in p.actions)]


def _incumbent(problem: Problem, plans: list[Plan], with_swap_wait: bool):
    """The fastest of `plans` that fits the budget, as `(makespan, plan)`, or None."""
    best = None
    for plan in plans:
        if not with_swap_wait and any(w is not None for w in plan.swap_wait):
            continue
        if best is not None and problem.out_of_time():
            break  # one that fits is enough once the time is out (10^5 layers: 1 s a plan)
        makespan, peak = problem.scorer.score_plan(plan)
        if problem.fits(peak) and (best is None or makespan < best[0]):
            best = (makespan, plan)
    return best


def _recompute_only_start(problem: Problem) -> list[Plan]:
    """The recompute-only optimum (`remat-dp`, or its best plan on its work share), as a
    start for the joint space.

    NOTE: a joint search stopped early returned 18.3% over T_ideal on
    resnet50-blocks at 50% (v1), where the recompute-only optimum alone gives
    16.6%. The dynamic program proves that optimum in milliseconds on nets
    the exact model takes (experiments/results/remat_dp.md), in exact bytes;
    the MIP on the keep/recompute model took up to 14 units on 32-48 layers.
    """
    from solvers.remat_dp import seed_joint

    if problem.expired():
        return []
    seeded = seed_joint(problem, share=RECOMPUTE_START_SHARE)
    return [] if seeded is None else [seeded[0]]


def _relaxation_bound(problem: Problem) -> float | None:
    """The relaxation's bound (seconds; None: nothing fits), on a small share of the work.

    It is valid for every action set (a restricted optimum is never below the
    joint one), menus included (one relaxed action per option), and often
    equals the optimum: a warm start that meets it is
    optimal at once, and as a floor on the model's objective it lets the
    back-end stop as soon as it finds a plan that meets it.
    """
    from solvers.model.relaxation import relaxation_bound

    work = work_share(problem, RELAXATION_SHARE, RELAXATION_WORK)
    seconds = problem.time_left()
    if seconds is not None:
        seconds = max(0.05, min(RELAXATION_SHARE * seconds, RELAXATION_WORK))
    return relaxation_bound(
        problem.profile, problem.budget, time_limit=seconds, work_limit=work, meter=problem.meter
    )


def _polish(problem: Problem, incumbent: tuple[float, Plan], target: float, work: float | None):
    """The incumbent improved by the search tier on `work` units, as `(makespan, plan)`.

    NOTE: on chains of a few dozen layers the back-end spends most of its
    time *finding* the optimum, not proving it (on 32-layer chains the
    relaxation bound often equals the optimum), while the search tier finds
    it quickly. The search stops early once it meets `target` (the
    relaxation's bound); small nets, which the back-end solves at once,
    skip it.
    """
    if problem.n < POLISH_FROM_LAYERS or problem.profile.has_options:
        return incumbent  # the search tier does not plan over menus (v3) yet
    from solvers.lns import layer_phases
    from solvers.search.driver import search as run_search
    from solvers.search.engine import Incumbent

    limited = problem.share(1.0, work_cap=work)
    inc = Incumbent(limited, incumbent[1], target=target, patience=POLISH_PATIENCE)
    run_search(inc, layer_phases(problem.n, POLISH_WINDOW, POLISH_WINDOW_WORK))
    if inc.feasible and inc.makespan < incumbent[0]:
        return inc.makespan, inc.plan()
    return incumbent


def _stopped(incumbent, bound: float | None, why: str) -> SolverOutput:
    """The best start, when the limits end the solve before the back-end runs."""
    if incumbent is None:
        return SolverOutput(None, Status.TIMEOUT, bound, f"{why} before any plan fitted")
    return SolverOutput(
        incumbent[1], Status.FEASIBLE, bound, f"{why}: the best starting plan", stopped=True
    )


def solve_exact(
    problem: Problem,
    *,
    actions: Sequence[Action] = ALL_ACTIONS,
    backend: str = "cpsat",
    threads: int = 1,
    warm_start: Plan | None = None,
    with_swap_wait: bool = True,
    max_layers: int = DEFAULT_MAX_LAYERS,
) -> SolverOutput:
    """Solve the plan model over `actions`; see the module docstring."""
    record = backends.get(backend)
    record.load()  # a missing package is named before any work is done
    threads = _check_threads(threads)
    _check_size(problem, max_layers)
    space = "/".join(a.value for a in actions)
    joint = set(actions) == set(ALL_ACTIONS)

    starters = starters_problem(problem)
    plans = _warm_starts(starters, actions, warm_start)
    charge_starters(problem, starters)
    incumbent = _incumbent(problem, plans, with_swap_wait)
    t_ideal = problem.profile.t_ideal
    if incumbent is not None and incumbent[0] <= t_ideal * (1 + 1e-12):
        return SolverOutput(
            incumbent[1],
            Status.OPTIMAL,
            t_ideal,
            message="a warm start reaches T_ideal: optimal without a search",
        )
    if problem.expired():
        return _stopped(incumbent, None, "the limit was reached")

    # NOTE: a relaxation that fits nothing is not taken as proof of
    # infeasibility here (the back-end proves that exactly); it gives no floor.
    relaxed = _relaxation_bound(problem) or t_ideal
    target = relaxed * (1 + OPTIMALITY_GAP)
    source, searched = "a warm start", "a search"
    if joint and (incumbent is None or incumbent[0] > target):
        plans += _recompute_only_start(problem)
        incumbent = _incumbent(problem, plans, with_swap_wait)
    if incumbent is not None and incumbent[0] > target and joint and with_swap_wait:
        work = work_share(problem, POLISH_SHARE, POLISH_WORK)
        polished = _polish(problem, incumbent, target, work)
        if polished is not incumbent:
            incumbent = polished
            source, searched = "the large-neighbourhood search's plan", "a full search"
    if incumbent is not None and incumbent[0] <= target:
        return SolverOutput(
            incumbent[1],
            Status.OPTIMAL,
            min(relaxed, incumbent[0]),
            message=f"{source} meets the relaxation's lower bound: optimal without {searched}",
        )
    if problem.expired():
        return _stopped(incumbent, relaxed, "the limit was reached")
    if not affordable(problem, record, problem.n, can_swap=SWAP in actions):
        return _stopped(incumbent, relaxed, "the limit leaves too little to build the model")

    form = build(problem.profile, problem.budget, actions=actions, with_swap_wait=with_swap_wait)
    charge_model(problem, form)
    add_objective_floor(form, relaxed)
    hint = None
    if incumbent is not None:
        charge_hint(problem, form)
        hint = evaluate(form, form.decisions(incumbent[1]), stop=problem.out_of_time)
        if hint is None:  # the deadline passed while the hint was worked out
            return _stopped(incumbent, relaxed, "the limit was reached")
    used, threads_note = search_threads(problem, record, threads)
    how = ""
    settled = None
    if record.objective_cap:
        settled, hint = probe_relaxation_bound(problem, form, record, used, hint, relaxed)
    if settled is not None:
        result, how = settled, " (a plan at the relaxation's bound, objective capped there)"
    else:
        result = search(problem, form, record, used, hint)
    return finish(problem, form, record, result, incumbent, relaxed, space, how + threads_note)


# -- registered methods ---------------------------------------------------------------


def exact(
    problem: Problem,
    *,
    backend: str = "cpsat",
    threads: int = 1,
    warm_start: Plan | None = None,
    with_swap_wait: bool = True,
    max_layers: int = DEFAULT_MAX_LAYERS,
) -> SolverOutput:
    """Proven-optimal keep/swap/recompute plan (or best found and a bound, at a limit)."""
    return solve_exact(
        problem,
        backend=backend,
        threads=threads,
        warm_start=warm_start,
        with_swap_wait=with_swap_wait,
        max_layers=max_layers,
    )


def recompute_only(
    problem: Problem,
    *,
    backend: str = "cpsat",
    threads: int = 1,
    warm_start: Plan | None = None,
    max_layers: int = DEFAULT_MAX_LAYERS,
) -> SolverOutput:
    """Optimal keep/recompute plan: the space Checkmate, Rotor and PyTorch's budget decide."""
    return solve_exact(
        problem,
        actions=(KEEP, RECOMPUTE),
        backend=backend,
        threads=threads,
        warm_start=warm_start,
        with_swap_wait=False,
        max_layers=max_layers,
    )


def swap_only(
    problem: Problem,
    *,
    backend: str = "cpsat",
    threads: int = 1,
    warm_start: Plan | None = None,
    with_swap_wait: bool = True,
    max_layers: int = DEFAULT_MAX_LAYERS,
) -> SolverOutput:
    """Optimal keep/swap plan: the space vDNN, SwapAdvisor and plain offloading decide."""
    return solve_exact(
        problem,
        actions=(KEEP, SWAP),
        backend=backend,
        threads=threads,
        warm_start=warm_start,
        with_swap_wait=with_swap_wait,
        max_layers=max_layers,
    )
