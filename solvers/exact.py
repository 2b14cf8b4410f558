"""Exact methods: the whole plan space and its restricted variants, on any back-end.

Each method builds `solvers.formulation`, hands a warm start (the greedy's
plan, or the caller's) to the back-end, reads the plan back, re-scores it in
floating point and reports a lower bound that accounts for time rounding.
The returned plan is never worse than the warm start.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence

from planopt.budget import min_memory_plan
from planopt.errors import SolverOptionError, SolverUnavailableError
from planopt.plan import KEEP, RECOMPUTE, SWAP, Action, Plan
from planopt.problem import Problem
from planopt.result import SolverOutput, Status
from solvers.cpsat import BackendResult
from solvers.formulation import Formulation, build, evaluate

ALL_ACTIONS: tuple[Action, ...] = (KEEP, SWAP, RECOMPUTE)
# The model has O(L^2) variables; past this many layers building it alone
# takes longer than users expect of a time limit.
DEFAULT_MAX_LAYERS = 200

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
            f"model grows with L^2), got {problem.n}; raise max_layers, or use 'greedy' or "
            f"planopt.lower_bound for nets this size"
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

    form = build(problem.profile, problem.budget, actions=actions, with_swap_wait=with_swap_wait)
    hint = None if incumbent is None else evaluate(form, form.decisions(incumbent[1]))
    result = run(
        form, time_limit=problem.time_left(), threads=threads, seed=problem.seed, hint=hint
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
    note = f"{backend}: {result.status}"
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
    hint gives the same plan for the same seed every time. If that re-solve
    runs out of time, the racing result is kept and the message says so.
    """
    from solvers.cpsat import solve_cpsat

    again = solve_cpsat(
        form,
        time_limit=problem.time_left(),
        threads=1,
        seed=problem.seed,
        hint=hint,
        objective_at_most=round(result.objective),
    )
    if again.values is None:
        return result, note + " (not re-derived single-threaded: plan may vary between runs)"
    return BackendResult("optimal", again.values, result.objective, result.bound), note


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
