"""Exact methods: the whole plan space and its restricted variants, on any back-end.

Each method builds `solvers.formulation`, hands a warm start (the greedy's
plan, or the caller's) to the back-end, reads the plan back, re-scores it in
floating point and reports a lower bound that accounts for time rounding.
The returned plan is never worse than the warm start.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Sequence

from planopt.budget import min_memory_plan
from planopt.errors import SolverOptionError, SolverUnavailableError
from planopt.plan import KEEP, RECOMPUTE, SWAP, Action, Plan
from planopt.problem import Problem
from planopt.result import SolverOutput, Status
from solvers.cpsat import BackendResult
from solvers.formulation import Formulation, Linear, build, evaluate, var

ALL_ACTIONS: tuple[Action, ...] = (KEEP, SWAP, RECOMPUTE)
# The model has O(L^2) variables; past this many layers building it alone
# takes longer than users expect of a time limit.
DEFAULT_MAX_LAYERS = 200
# "Optimal" means proven within this relative gap: a plan at most 5e-7 above
# a proven lower bound (the relaxation shaves 1e-7 off its bound for the LP's
# tolerances, and model time is rounded to ~1e-9 of the horizon per
# operation). Tests compare optima at 1e-6.
OPTIMALITY_GAP = 5e-7
# The relaxation bound (see `_relaxation_bound`) gets this share of the time
# limit, at most RELAXATION_TIME seconds.
RELAXATION_SHARE = 0.1
RELAXATION_TIME = 5.0
# The warm start is polished by the large-neighbourhood search (see `_polish`)
# on nets of at least POLISH_FROM_LAYERS layers, for POLISH_SHARE of the time
# left, at most POLISH_TIME seconds, with exact windows of POLISH_WINDOW layers;
# on 32-layer chains its improvements came within 2 s or (rarely) not at all.
POLISH_FROM_LAYERS = 16
POLISH_SHARE = 0.15
POLISH_TIME = 3.0
POLISH_WINDOW = 8
POLISH_WINDOW_SECONDS = 2.0
# NOTE: the polish pays where it meets the relaxation's bound at once (often
# in 0.05 s); on the 32-layer chains it did not, 5 s of patience bought
# nothing that CP-SAT (with its own LNS workers) did not find anyway.
POLISH_PATIENCE = 1.0  # seconds without a better plan before the polish gives up
# CP-SAT restarts (see `_cpsat_with_restarts`): the first slice, doubling after.
RESTART_FIRST_SLICE = 1.0
RESTART_SLICE_AT_32 = 8.0  # the first slice at L = 32 (scaled with L^2, see `first_slice`)
RESTART_SLICE_MAX = 30.0
RESTART_MAX_SLICES = 12
# The single-threaded re-derivation of a proven optimum (`_canonical`) gets at
# most this long: it usually takes about 1 s, but once took 46 s at L = 32.
CANONICAL_TIME = 5.0
# Before the restarts CP-SAT is asked for a plan at the relaxation's bound
# (`_probe_relaxation_bound`), for PROBE_SHARE of the time left, at most
# PROBE_TIME seconds (0: no probe).
PROBE_TIME = 5.0
PROBE_SHARE = 0.1

# backend name -> (module that must be importable, "module:function")
BACKENDS: dict[str, tuple[str, str]] = {
    "cpsat": ("ortools", "solvers.cpsat:solve_cpsat"),
    "cbc": ("pulp", "solvers.milp:solve_cbc"),
    "highs": ("highspy", "solvers.milp:solve_highs"),
    "gurobi": ("gurobipy", "solvers.milp:solve_gurobi"),
    "cplex": ("cplex", "solvers.milp:solve_cplex"),
}


def backend_function(name: str) -> Callable:
    """The back-end's solve function; unknown or missing back-ends are named."""
    if name not in BACKENDS:
        raise SolverOptionError(f"backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    needed, target = BACKENDS[name]
    if importlib.util.find_spec(needed) is None:
        raise SolverUnavailableError(
            f"backend {name!r} needs the package {needed!r}, which is not installed"
        )
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _check_threads(threads: int) -> int:
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise SolverOptionError(f"threads must be an integer >= 1, got {threads!r}")
    return threads


def _warm_starts(problem: Problem, actions: Sequence[Action], given: Plan | None) -> list[Plan]:
    """Starting plans inside the action set: the caller's, the greedy's, sqrt-n's and
    the minimum-memory plan (which fits any budget >= min_budget)."""
    from solvers.baselines import sqrt_n
    from solvers.pooch import pooch

    plans: list[Plan] = []
    if given is not None:
        plans.append(given.for_profile(problem.profile))
    allowed = set(actions)
    if allowed == set(ALL_ACTIONS):
        plans.append(pooch(problem).plan)
    if RECOMPUTE in allowed:
        plans.append(sqrt_n(problem).plan)
    plans.append(min_memory_plan(problem.profile))
    return [p for p in plans if p is not None and all(a in allowed for a in p.actions)]


def _incumbent(problem: Problem, plans: list[Plan], with_swap_wait: bool):
    """The fastest of `plans` that fits the budget, as `(makespan, plan)`, or None."""
    best = None
    for plan in plans:
        if not with_swap_wait and any(w is not None for w in plan.swap_wait):
            continue
        makespan, peak = problem.scorer.score_plan(plan)
        if problem.fits(peak) and (best is None or makespan < best[0]):
            best = (makespan, plan)
    return best


def _check_size(problem: Problem, max_layers: int) -> None:
    if isinstance(max_layers, bool) or not isinstance(max_layers, int) or max_layers < 1:
        raise SolverOptionError(f"max_layers must be an integer >= 1, got {max_layers!r}")
    if problem.n > max_layers:
        raise SolverOptionError(
            f"method 'exact': the net must have at most max_layers={max_layers} layers (the "
            f"model grows with L^2), got {problem.n}; to allow it pass max_layers={problem.n} "
            f"to planopt.solve (the command line takes no method options yet), or plan a net "
            f"this size with method 'lns' or 'auto' (--method lns) and bound its optimum with "
            f"method 'lower-bound'"
        )


def solve_exact(
    problem: Problem,
    *,
    actions: Sequence[Action] = ALL_ACTIONS,
    backend: str = "cpsat",
    threads: int = 2,
    warm_start: Plan | None = None,
    with_swap_wait: bool = True,
    max_layers: int = DEFAULT_MAX_LAYERS,
) -> SolverOutput:
    """Solve the formulation over `actions`; see the module docstring."""
    run = backend_function(backend)
    threads = _check_threads(threads)
    _check_size(problem, max_layers)
    space = "/".join(a.value for a in actions)
    incumbent = _incumbent(problem, _warm_starts(problem, actions, warm_start), with_swap_wait)
    t_ideal = problem.profile.t_ideal
    if incumbent is not None and incumbent[0] <= t_ideal * (1 + 1e-12):
        return SolverOutput(
            incumbent[1],
            Status.OPTIMAL,
            t_ideal,
            message="a warm start reaches T_ideal: optimal without a search",
        )

    # NOTE: a relaxation that fits nothing is not taken as proof of
    # infeasibility here (the back-end proves that exactly); it gives no floor.
    relaxed = _relaxation_bound(problem) or t_ideal
    target = relaxed * (1 + OPTIMALITY_GAP)
    if incumbent is not None:
        source, searched = "a warm start", "a search"
        if incumbent[0] > target and set(actions) == set(ALL_ACTIONS) and with_swap_wait:
            polished = _polish(problem, incumbent, target)
            if polished is not incumbent:
                incumbent = polished
                source, searched = "the large-neighbourhood search's plan", "a full search"
        if incumbent[0] <= target:
            return SolverOutput(
                incumbent[1],
                Status.OPTIMAL,
                min(relaxed, incumbent[0]),
                message=f"{source} meets the relaxation's lower bound: optimal without {searched}",
            )

    form = build(problem.profile, problem.budget, actions=actions, with_swap_wait=with_swap_wait)
    _add_objective_floor(form, relaxed)
    hint = None if incumbent is None else evaluate(form, form.decisions(incumbent[1]))
    how = ""
    if backend == "cpsat":
        settled, hint = _probe_relaxation_bound(problem, form, threads, hint, relaxed)
        if settled is not None:
            result, how = settled, " (a plan at the relaxation's bound, objective capped there)"
        else:
            result = _cpsat_with_restarts(problem, form, threads, hint)
    else:
        result = run(
            form,
            time_limit=problem.time_left(),
            threads=threads,
            seed=problem.seed,
            hint=hint,
            relative_gap=OPTIMALITY_GAP,
        )
    if result.status == "infeasible":
        if incumbent is not None:  # the back-end contradicts a plan that fits: numerical trouble
            return SolverOutput(
                incumbent[1],
                Status.FEASIBLE,
                None,
                message=(
                    f"{backend} claimed no plan fits, yet the warm start does (numerical trouble); "
                    f"returning the warm start"
                ),
            )
        return SolverOutput(
            None,
            Status.INFEASIBLE,
            message=(
                f"no plan using only {space} fits the budget {problem.budget:.0f} bytes "
                f"(proven by {backend})"
            ),
        )

    proven = False
    best = incumbent
    note = f"{backend}: {result.status}{how}"
    if backend == "cbc" and threads > 1:
        note += " (CBC runs single-threaded: its parallel search is not trusted)"
    if result.values is not None:
        if result.status == "optimal" and threads > 1 and backend == "cpsat":
            result, note = _canonical(problem, form, result, hint, note)
        plan = form.decode(lambda v: result.values[v])
        makespan, peak = problem.scorer.score_plan(plan)
        if problem.fits(peak) and (best is None or makespan <= best[0]):
            best = (makespan, plan)
            proven = result.status == "optimal"
        elif result.status == "optimal" and best is not None and best[0] <= makespan:
            proven = True  # the warm start is at least as good as the model's optimum
    bound = _lower_bound(problem, form, result.bound)
    bound = relaxed if bound is None else max(bound, relaxed)
    if best is not None and best[0] <= bound * (1 + OPTIMALITY_GAP):
        proven = True
    if best is None:
        return SolverOutput(
            None,
            Status.TIMEOUT,
            bound,
            message=f"{backend}: time limit reached before any plan was found",
        )
    if proven:
        return SolverOutput(best[1], Status.OPTIMAL, min(best[0], bound or best[0]), note)
    return SolverOutput(best[1], Status.FEASIBLE, bound, note)


def _canonical(problem: Problem, form: Formulation, result, hint, note: str):
    """Re-derive a proven optimum single-threaded, so the plan does not depend on races.

    NOTE: parallel CP-SAT workers race, so two runs may return different
    optimal plans of the same makespan. Re-solving with one worker, the
    makespan capped at the proven optimum and the (deterministic) warm-start
    hint, stopping at the first plan under the cap, gives the same plan for
    the same seed every time. If that re-solve
    runs out of time, the racing result is kept and the message says so.
    """
    from solvers.cpsat import solve_cpsat

    left = problem.time_left()
    cap = CANONICAL_TIME if left is None else min(left, CANONICAL_TIME)
    again = solve_cpsat(
        form,
        time_limit=cap,
        threads=1,
        seed=problem.seed,
        hint=hint,
        objective_at_most=round(result.objective),
        relative_gap=1.0,  # any plan under the cap will do: stop at the first
    )
    if again.values is None:
        return result, note + " (not re-derived single-threaded: plan may vary between runs)"
    return BackendResult("optimal", again.values, result.objective, result.bound), note


def _probe_relaxation_bound(
    problem: Problem, form: Formulation, threads: int, hint: list[int] | None, relaxed: float
) -> tuple[BackendResult | None, list[int] | None]:
    """Ask CP-SAT for a plan at the relaxation's bound, the objective capped there.

    Returns `(result, hint)`: `result` is an optimal BackendResult when the
    probe settles the problem (a plan at the bound), else None; `hint` is
    the hint to go on with (the probe's plan when the re-score put it just
    above the bound). When the probe proves that no plan meets the bound,
    the floor on the objective in `form` rises past the cap.

    NOTE: on 32-layer chains the relaxation's bound is often the optimum and
    CP-SAT spends its time finding that plan, not proving it. With the
    objective's domain shrunk to one point, propagation prunes most of the
    plan space: quiet machine, 2 threads, seed 0, 50% budgets, time to proof
    21.3 -> 2.9 s and 19.4 -> 7.4 s (47 -> 43 s on the third); the 5 s are
    lost where the bound is weak (30%: 14% over T_ideal against a 0.16% bound).
    """
    if PROBE_TIME <= 0:
        return None, hint
    from solvers.cpsat import solve_cpsat

    target = relaxed * (1 + OPTIMALITY_GAP)
    cap = math.floor((target + form.time_error_bound()) / form.time_unit)
    left = problem.time_left()
    seconds = PROBE_TIME if left is None else min(PROBE_SHARE * left, PROBE_TIME)
    result = solve_cpsat(
        form,
        time_limit=seconds,
        threads=threads,
        seed=problem.seed,
        hint=hint,
        objective_at_most=cap,
        relative_gap=1.0,
    )
    if result.status == "infeasible":
        form.model.add(Linear(var(form.model.objective), cap + 1, None, in_ticks=True))
        return None, hint
    if result.values is None:
        return None, hint
    plan = form.decode(lambda v: result.values[v])
    makespan, peak = problem.scorer.score_plan(plan)
    if problem.fits(peak) and makespan <= target:
        return BackendResult("optimal", result.values, result.objective, result.objective), hint
    return None, result.values


def first_slice(n: int) -> float:
    """The first CP-SAT slice for a chain of `n` layers (seconds)."""
    return min(RESTART_SLICE_MAX, max(RESTART_FIRST_SLICE, RESTART_SLICE_AT_32 * (n / 32) ** 2))


def _cpsat_with_restarts(
    problem: Problem, form: Formulation, threads: int, hint: list[int] | None
) -> BackendResult:
    """CP-SAT in time slices that double, each with the next seed, the best plan as
    hint and the best proven bound as a floor.

    NOTE: with two workers CP-SAT's time to prove an optimum is heavy-tailed in
    the seed: one 10-layer chain proved in 0.19 s with seeds 1 and 2 and not in
    20 s with seeds 0 and 3, whichever the hint. Restarts cap the time lost
    to an unlucky seed, but each restart also throws the search's progress
    away: five hard 32-layer chains took 3-13 s to prove in one run and 13-31
    s in slices of 2, 4, 8, 16 s. So the first slice grows with the model
    (O(L^2) variables, `first_slice`). Every slice's bound is a proven bound of
    the model; it is kept and added as a floor on the objective for the next.
    The slices (and so the result) depend only on `problem.seed` and the
    clock, like any time-limited solve.
    """
    from solvers.cpsat import solve_cpsat

    best: BackendResult | None = None
    bound: float | None = None
    slice_seconds = first_slice(problem.n)
    for attempt in range(RESTART_MAX_SLICES):
        left = problem.time_left()
        last = attempt == RESTART_MAX_SLICES - 1 or (left is not None and left <= 2 * slice_seconds)
        limit = left if last else slice_seconds
        result = solve_cpsat(
            form,
            time_limit=limit,
            threads=threads,
            seed=problem.seed + attempt,
            hint=hint,
            relative_gap=OPTIMALITY_GAP,
        )
        if result.status in ("optimal", "infeasible"):
            return result
        if result.bound is not None and (bound is None or result.bound > bound):
            bound = result.bound
            form.model.add(
                Linear(var(form.model.objective), math.ceil(bound - 1e-6), None, in_ticks=True)
            )
        if result.values is not None and (best is None or result.objective < best.objective):
            best = result
            hint = result.values
        if last or problem.expired():
            break
        slice_seconds *= 2
    if best is None:
        return BackendResult("unknown", None, None, bound)
    return BackendResult("feasible", best.values, best.objective, bound)


def _polish(problem: Problem, incumbent: tuple[float, Plan], target: float):
    """The warm start improved by `solvers.lns` on a share of the time, as `(makespan, plan)`.

    NOTE: on chains of a few dozen layers CP-SAT with two workers spends most
    of its time *finding* the optimum, not proving it (on 32-layer chains the
    relaxation bound often equals the optimum), while the large-neighbourhood
    search finds it in seconds. The search stops early once it meets
    `target` (the relaxation's bound), and small nets, which CP-SAT solves in
    well under a second, skip it.
    """
    if problem.n < POLISH_FROM_LAYERS:
        return incumbent
    from solvers.lns import layer_phases
    from solvers.search.driver import search
    from solvers.search.engine import Incumbent

    left = problem.time_left()
    seconds = None if left is None else min(POLISH_SHARE * left, POLISH_TIME)
    limited = problem.share(POLISH_SHARE, work_cap=POLISH_TIME, seconds=seconds)
    inc = Incumbent(limited, incumbent[1], target=target, patience=POLISH_PATIENCE)
    search(inc, layer_phases(problem.n, POLISH_WINDOW, POLISH_WINDOW_SECONDS))
    if inc.feasible and inc.makespan < incumbent[0]:
        return inc.makespan, inc.plan()
    return incumbent


def _relaxation_bound(problem: Problem) -> float | None:
    """`solvers.relaxation`'s bound (seconds; None: nothing fits), on a small share of the time.

    It is valid for every action set (a restricted optimum is never below the
    joint one) and often equals the optimum: a warm start that meets it is
    optimal at once, and as a floor on the model's objective it lets the
    back-end stop as soon as it finds a plan that meets it.
    """
    from solvers.search.bounds import relaxation_lower_bound

    return relaxation_lower_bound(problem, RELAXATION_SHARE, cap=RELAXATION_TIME, relax=False)


def _add_objective_floor(form: Formulation, seconds: float) -> None:
    """Constrain the model's makespan to at least `seconds`, less every rounding error.

    Any plan's model makespan is within `time_error_bound` of its real one,
    and its real one is at least the bound, so no plan is cut off (the warm
    start's hint included).
    """
    floor_ticks = math.floor((seconds - form.time_error_bound()) / form.time_unit) - 1
    if floor_ticks > 0:
        form.model.add(Linear(var(form.model.objective), floor_ticks, None, in_ticks=True))


def _lower_bound(problem: Problem, form: Formulation, bound_ticks: float | None) -> float | None:
    """A bound in seconds from the back-end's bound in ticks, widened for rounding."""
    t_ideal = problem.profile.t_ideal
    if bound_ticks is None:
        return None
    return max(t_ideal, form.seconds(bound_ticks) - form.time_error_bound())


# -- registered methods ---------------------------------------------------------------


def exact(
    problem: Problem,
    *,
    backend: str = "cpsat",
    threads: int = 2,
    warm_start: Plan | None = None,
    with_swap_wait: bool = True,
    max_layers: int = DEFAULT_MAX_LAYERS,
) -> SolverOutput:
    """Proven-optimal keep/swap/recompute plan (or best found and a bound, on time-out)."""
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
    threads: int = 2,
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
    threads: int = 2,
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
