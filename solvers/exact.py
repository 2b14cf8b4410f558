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
from solvers.formulation import Formulation, build, evaluate

ALL_ACTIONS: tuple[Action, ...] = (KEEP, SWAP, RECOMPUTE)

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
    """Feasible-looking starting plans inside the action set, best-known first."""
    plans: list[Plan] = []
    if given is not None:
        plans.append(given.for_profile(problem.profile))
    if importlib.util.find_spec("solvers.pooch") is not None and set(actions) == set(ALL_ACTIONS):
        from solvers.pooch import pooch

        out = pooch(problem)
        if out.plan is not None:
            plans.append(out.plan)
    plans.append(min_memory_plan(problem.profile))  # always fits a budget >= min_budget
    return [p for p in plans if all(a in actions for a in p.actions)]


def solve_exact(
    problem: Problem,
    *,
    actions: Sequence[Action] = ALL_ACTIONS,
    backend: str = "cpsat",
    threads: int = 2,
    warm_start: Plan | None = None,
    with_swap_wait: bool = True,
) -> SolverOutput:
    """Solve the formulation over `actions`; see the module docstring."""
    run = backend_function(backend)
    threads = _check_threads(threads)
    scorer = problem.scorer
    starts = _warm_starts(problem, actions, warm_start)
    if not with_swap_wait:
        starts = [p for p in starts if all(w is None for w in p.swap_wait)]
    scored = []
    for plan in starts:
        makespan, peak = scorer.score_plan(plan)
        if problem.fits(peak):
            scored.append((makespan, plan))
    scored.sort(key=lambda mp: mp[0])
    incumbent = scored[0] if scored else None

    form = build(problem.profile, problem.budget, actions=actions, with_swap_wait=with_swap_wait)
    hint = None
    if incumbent is not None:
        hint = evaluate(form, form.decisions(incumbent[1]))
    result = run(
        form, time_limit=problem.time_left(), threads=threads, seed=problem.seed, hint=hint
    )

    if result.status == "infeasible":
        return SolverOutput(
            None,
            Status.INFEASIBLE,
            message=(
                f"no plan using only {'/'.join(a.value for a in actions)} fits the budget "
                f"{problem.budget:.0f} bytes (proven by {backend})"
            ),
        )
    bound = _lower_bound(problem, form, result.bound)
    best = incumbent
    proven = False
    if result.values is not None:
        plan = form.decode(lambda v: result.values[v])
        makespan, peak = scorer.score_plan(plan)
        if problem.fits(peak) and (best is None or makespan <= best[0]):
            best = (makespan, plan)
            proven = result.status == "optimal"
        elif result.status == "optimal" and best is not None and best[0] <= makespan:
            proven = True  # the incumbent is at least as good as the model's optimum
    if best is None:
        return SolverOutput(
            None,
            Status.TIMEOUT,
            bound,
            message=f"{backend}: time limit reached before any plan was found",
        )
    status = Status.OPTIMAL if proven else Status.FEASIBLE
    if proven:
        bound = min(best[0], bound) if bound is not None else best[0]
    return SolverOutput(best[1], status, bound, message=f"{backend}: {result.status}")


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
) -> SolverOutput:
    """Proven-optimal keep/swap/recompute plan (or best found and a bound, on time-out)."""
    return solve_exact(
        problem,
        backend=backend,
        threads=threads,
        warm_start=warm_start,
        with_swap_wait=with_swap_wait,
    )


def recompute_only(
    problem: Problem, *, backend: str = "cpsat", threads: int = 2, warm_start: Plan | None = None
) -> SolverOutput:
    """Optimal keep/recompute plan: the space Checkmate, Rotor and PyTorch's budget decide."""
    return solve_exact(
        problem,
        actions=(KEEP, RECOMPUTE),
        backend=backend,
        threads=threads,
        warm_start=warm_start,
        with_swap_wait=False,
    )


def swap_only(
    problem: Problem,
    *,
    backend: str = "cpsat",
    threads: int = 2,
    warm_start: Plan | None = None,
    with_swap_wait: bool = True,
) -> SolverOutput:
    """Optimal keep/swap plan: the space vDNN, SwapAdvisor and plain offloading decide."""
    return solve_exact(
        problem,
        actions=(KEEP, SWAP),
        backend=backend,
        threads=threads,
        warm_start=warm_start,
        with_swap_wait=with_swap_wait,
    )
