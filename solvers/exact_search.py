"""How the exact method drives a back-end: work shares, the probe, work slices, the answer.

Every call gets a work limit (`planopt.work` units) computed from the work
left, never from the clock; the time left is passed on as a guard only.
A solve limited by time alone has no work left to share, so there the
seconds left stand in for units (1 unit ~ 1 s of one core): its shares
then depend on the clock, as its result does anyway.
"""

from __future__ import annotations

import math

from planopt.problem import Problem
from planopt.result import SolverOutput, Status
from solvers.backends import Backend, BackendResult
from solvers.backends import Status as Found
from solvers.model import Formulation, Linear, var

# "Optimal" means proven within this relative gap: a plan at most 5e-7 above
# a proven lower bound (the relaxation shaves 1e-7 off its bound for the LP's
# tolerances, and model time is rounded to ~1e-9 of the horizon per
# operation). Tests compare optima at 1e-6.
OPTIMALITY_GAP = 5e-7
# Building the plan model, per variable and constraint (3.1e-6-5.7e-6 measured
# at 40-160 layers on the reference machine); translating it for a back-end
# is charged at the back-end's own rate (`Backend.translate_units`).
BUILD_UNITS_PER_ITEM = 5e-6
# Evaluating a hint in the model, per variable and constraint and per sweep (see
# `charge_hint`).
HINT_UNITS_PER_ITEM_SWEEP = 2.5e-7
# Before the slices the back-end is asked for a plan at the relaxation's bound
# (`probe_relaxation_bound`), for PROBE_SHARE of the work left, at most PROBE_WORK
# units (0: no probe).
PROBE_SHARE = 0.1
PROBE_WORK = 5.0
# Work slices (see `search`): the first slice (work units), doubling after.
RESTART_FIRST_SLICE = 1.0
RESTART_SLICE_AT_32 = 8.0  # the first slice at L = 32 (scaled with L^2, see `first_slice`)
RESTART_SLICE_MAX = 30.0
# NOTE: 1: one call on all the work left. Measured under v2
# (experiments/results/exact_ablation.md, 10 units, 12/16-layer chains 30% of
# the way from the minimum budget to keep-all): a 12-layer chain the slices
# did not prove in 10 units was proven by one call; nowhere did slices prove
# one that one call did not. A restart throws away what CP-SAT has learned.
RESTART_MAX_SLICES = 1
# The single-threaded re-derivation of a proven optimum found by racing threads
# (`canonical`) gets at most this much work.
CANONICAL_WORK = 5.0


def left(problem: Problem) -> float | None:
    """Raw work left; under a time limit alone, the seconds left as raw counts at the
    method's rate (a unit is a CPU-second; None: unlimited)."""
    work = problem.work_left()
    if work is not None:
        return work
    seconds = problem.time_left()
    return None if seconds is None else problem.meter.raw(seconds)


def work_share(problem: Problem, fraction: float, cap: float | None) -> float | None:
    """`fraction` of what is `left`, at most `cap` units (None: unlimited)."""
    rest = left(problem)
    if rest is None:
        return cap
    return fraction * rest if cap is None else min(fraction * rest, cap)


def charge_model(problem: Problem, form: Formulation) -> None:
    """Charge building `form` (it grows with L^2, and is not free)."""
    problem.meter.charge(BUILD_UNITS_PER_ITEM * _items(form))


def charge_hint(problem: Problem, form: Formulation) -> None:
    """Charge working out a warm start's values in `form` (`solvers.model.evaluate`).

    NOTE (issue 25): it sweeps every constraint until nothing changes, about
    L + 1 sweeps, at 0.2-0.32 us an item a sweep (24-120 layers): 0.19 s at
    120 layers keep/recompute, 0.87 s at 80 layers joint, never charged before.
    """
    problem.meter.charge(HINT_UNITS_PER_ITEM_SWEEP * _items(form) * (problem.n + 2))


def _items(form: Formulation) -> int:
    return len(form.model.vars) + len(form.model.constraints)


def estimated_items(n: int, can_swap: bool) -> int:
    """Variables and constraints of the plan model of `n` layers (measured: 4.8-7.3 n^2
    with swaps at 20-160 layers, 52 n without)."""
    return 6 * n * n + 52 * n if can_swap else 52 * n


def affordable(problem: Problem, backend: Backend, n: int, can_swap: bool) -> bool:
    """Whether building and translating the model fits in the work (and seconds) left;
    a model that does not is not built (it would overrun the limit before solving)."""
    cost = estimated_items(n, can_swap) * (BUILD_UNITS_PER_ITEM + backend.translate_units)
    return all(rest is None or rest >= cost for rest in (problem.work_left(), problem.time_left()))


def add_objective_floor(form: Formulation, seconds: float) -> None:
    """Constrain the model's makespan to at least `seconds`, less every rounding error.

    Any plan's model makespan is within `time_error_bound` of its real one,
    and its real one is at least the bound, so no plan is cut off (the warm
    start's hint included).
    """
    floor_ticks = math.floor((seconds - form.time_error_bound()) / form.time_unit) - 1
    if floor_ticks > 0:
        form.model.add(Linear(var(form.model.objective), floor_ticks, None, in_ticks=True))


def bound_seconds(problem: Problem, form: Formulation, bound_ticks: float | None) -> float | None:
    """A bound in seconds from the back-end's bound in ticks, widened for rounding."""
    if bound_ticks is None:
        return None
    return max(problem.profile.t_ideal, form.seconds(bound_ticks) - form.time_error_bound())


def search_threads(problem: Problem, backend: Backend, threads: int) -> tuple[int, str]:
    """The threads the search runs, and what the message says about them.

    Racing threads only where the clock decides the result anyway: a time
    limit and no work limit (see the module's NOTE on determinism).
    """
    used = backend.threads_used(threads)
    if used < threads:
        return used, f" ({backend.name} runs single-threaded)"
    if backend.deterministic(used):
        return used, ""
    if problem.deadline is None or problem.work_limit is not None:
        return 1, f" (1 worker, not {threads}: a search without a time limit stays deterministic)"
    return used, f" ({backend.caveat(used)})"


def run(
    backend: Backend,
    problem: Problem,
    form: Formulation,
    *,
    work: float | None,
    threads: int,
    hint: list[int] | None,
    seed_offset: int = 0,
    cap: int | None = None,
    gap: float = OPTIMALITY_GAP,
) -> BackendResult:
    """One back-end solve on `work` units (and the time left), charged to the problem
    with translating the model for it."""
    problem.meter.charge(backend.translate_units * _items(form))
    return backend.load()(
        form,
        time_limit=problem.time_left(),
        work_limit=work,
        threads=threads,
        seed=problem.seed + seed_offset,
        hint=hint,
        objective_at_most=cap,
        relative_gap=gap,
        meter=problem.meter,
    )


def probe_relaxation_bound(
    problem: Problem,
    form: Formulation,
    backend: Backend,
    threads: int,
    hint: list[int] | None,
    relaxed: float,
) -> tuple[BackendResult | None, list[int] | None]:
    """Ask the back-end for a plan at the relaxation's bound, the objective capped there.

    Returns `(result, hint)`: `result` is an optimal BackendResult when the
    probe settles the problem (a plan at the bound), else None; `hint` is
    the hint to go on with (the probe's plan when the re-score put it just
    above the bound). When the probe proves that no plan meets the bound,
    the floor on the objective in `form` rises past the cap.

    NOTE: on 32-layer chains the relaxation's bound is often the optimum and
    CP-SAT spends its time finding that plan, not proving it. With the
    objective's domain shrunk to one point, propagation prunes most of the
    plan space: 2 threads, seed 0, 50% budgets, time to proof 21.3 -> 2.9 s
    and 19.4 -> 7.4 s (47 -> 43 s on the third); the probe's share is lost
    where the bound is weak (30%: 14% over T_ideal against a 0.16% bound).
    """
    if PROBE_WORK <= 0 or problem.expired():
        return None, hint
    target = relaxed * (1 + OPTIMALITY_GAP)
    cap = math.floor((target + form.time_error_bound()) / form.time_unit)
    work = work_share(problem, PROBE_SHARE, PROBE_WORK)
    result = run(backend, problem, form, work=work, threads=threads, hint=hint, cap=cap, gap=1.0)
    if result.status is Found.INFEASIBLE:
        form.model.add(Linear(var(form.model.objective), cap + 1, None, in_ticks=True))
        return None, hint
    if result.values is None:
        return None, hint
    plan = form.decode(lambda v: result.values[v])
    makespan, peak = problem.scorer.score_plan(plan)
    if problem.fits(peak) and makespan <= target:
        settled = BackendResult(
            Found.OPTIMAL, result.values, result.objective, result.objective, result.work_used
        )
        return settled, hint
    return None, result.values


def first_slice(n: int) -> float:
    """The first slice for a chain of `n` layers (work units)."""
    return min(RESTART_SLICE_MAX, max(RESTART_FIRST_SLICE, RESTART_SLICE_AT_32 * (n / 32) ** 2))


def search(
    problem: Problem, form: Formulation, backend: Backend, threads: int, hint: list[int] | None
) -> BackendResult:
    """The back-end on all the work left: in slices for back-ends that restart with a new
    seed (`Backend.seed_restarts`), else in one call; a racing proof re-derived.

    NOTE: CP-SAT's time to prove an optimum is heavy-tailed in the seed: one
    10-layer chain proved in 0.19 s with seeds 1 and 2 and not in 20 s with
    seeds 0 and 3, whichever the hint. Restarts cap the work lost to an
    unlucky seed, but each restart also throws the search's progress away:
    five hard 32-layer chains took 3-13 s to prove in one run and 13-31 s in
    slices of 2, 4, 8, 16 s. So the first slice grows with the model (O(L^2)
    variables, `first_slice`). Every slice's bound is a proven bound of the
    model; it is kept and added as a floor on the objective for the next.
    The slices are work units: with a work limit, the same on any machine.
    """
    if not backend.seed_restarts:
        result = run(backend, problem, form, work=left(problem), threads=threads, hint=hint)
    else:
        result = _slices(problem, form, backend, threads, hint)
    if result.status is Found.OPTIMAL and not backend.deterministic(threads):
        result = canonical(problem, form, backend, result, hint)
    return result


def _slices(
    problem: Problem, form: Formulation, backend: Backend, threads: int, hint: list[int] | None
) -> BackendResult:
    best: BackendResult | None = None
    bound: float | None = None
    work_used = 0.0
    slice_work = first_slice(problem.n)
    for attempt in range(RESTART_MAX_SLICES):
        rest = left(problem)
        last = attempt == RESTART_MAX_SLICES - 1 or (rest is not None and rest <= 2 * slice_work)
        # The last slice gets all the work left (a time limit alone: the clock ends it).
        work = problem.work_left() if last else slice_work
        result = run(
            backend, problem, form, work=work, threads=threads, hint=hint, seed_offset=attempt
        )
        work_used += result.work_used
        if result.status in (Found.OPTIMAL, Found.INFEASIBLE):
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
        slice_work *= 2
    stop = result.note or "stopped by its limit"
    if best is None:
        return BackendResult(Found.UNKNOWN, None, None, bound, work_used, stop)
    return BackendResult(Found.FEASIBLE, best.values, best.objective, bound, work_used, stop)


def canonical(
    problem: Problem,
    form: Formulation,
    backend: Backend,
    result: BackendResult,
    hint: list[int] | None,
) -> BackendResult:
    """Re-derive a proven optimum found by racing threads on one thread.

    NOTE: racing CP-SAT workers may return different optimal plans of the
    same makespan. Re-solving with one worker, the makespan capped at the
    proven optimum and the warm-start hint, stopping at the first plan under
    the cap, gives the same plan for the same seed and model. If that
    re-solve runs out of work or time, the racing result is kept and the
    note says so.
    """
    if not backend.objective_cap or result.objective is None:
        return result
    again = run(
        backend,
        problem,
        form,
        work=work_share(problem, 1.0, CANONICAL_WORK),
        threads=1,
        hint=hint,
        cap=round(result.objective),
        gap=1.0,  # any plan under the cap will do: stop at the first
    )
    if again.values is None:
        note = "not re-derived single-threaded: the plan may vary between runs"
        return BackendResult(
            Found.OPTIMAL, result.values, result.objective, result.bound, result.work_used, note
        )
    return BackendResult(
        Found.OPTIMAL, again.values, result.objective, result.bound, result.work_used
    )


def at_model_optimum(form: Formulation, result: BackendResult, makespan: float) -> bool:
    """Whether a plan of `makespan` seconds is no slower than the back-end's proven
    optimum, to within the model's rounding.

    NOTE: a floating-point back-end (HiGHS, CBC) accepts a binary within its
    integrality tolerance of 0 or 1, which loosens its big-M rows; its optimum
    is then that of a slightly larger plan space, a lower bound still but not
    always a plan's makespan. Its claim proves a plan only at that value.
    """
    if result.objective is None:
        return False
    slack = 2 * form.time_error_bound() + 1e-12 * max(1.0, makespan)
    return makespan <= form.seconds(result.objective) + slack


def finish(
    problem: Problem,
    form: Formulation,
    backend: Backend,
    result: BackendResult,
    incumbent,
    relaxed: float,
    space: str,
    how: str,
) -> SolverOutput:
    """The output: the better of the back-end's plan and the incumbent, proven or not."""
    if result.status is Found.INFEASIBLE:
        if incumbent is not None:  # the back-end contradicts a plan that fits: numerical trouble
            return SolverOutput(
                incumbent[1],
                Status.FEASIBLE,
                None,
                message=(
                    f"{backend.name} claimed no plan fits, yet the warm start does (numerical "
                    f"trouble); returning the warm start"
                ),
            )
        return SolverOutput(
            None,
            Status.INFEASIBLE,
            message=(
                f"no plan using only {space} fits the budget {problem.budget:.0f} bytes "
                f"(proven by {backend.name})"
            ),
        )
    proven = False
    best = incumbent
    found_better = False
    unfit = ""
    if result.values is not None:
        plan = form.decode(lambda v: result.values[v])
        makespan, peak = problem.scorer.score_plan(plan)
        if not problem.fits(peak):
            unfit = (
                f"; its plan peaks at {peak:.0f} bytes, over the budget (a binary within "
                f"{backend.name}'s integrality tolerance loosened the model)"
            )
        if problem.fits(peak) and (best is None or makespan <= best[0]):
            found_better = best is None or makespan < best[0]
            best = (makespan, plan)
            proven = result.status is Found.OPTIMAL and at_model_optimum(form, result, makespan)
        elif result.status is Found.OPTIMAL and best is not None:
            # the warm start is at least as good as the model's optimum
            proven = at_model_optimum(form, result, best[0])
    bound = bound_seconds(problem, form, result.bound)
    bound = relaxed if bound is None else max(bound, relaxed)
    if best is not None and best[0] <= bound * (1 + OPTIMALITY_GAP):
        proven = True
    note = f"{backend.name}: {result.status}{how}"
    if result.note:
        note += f"; {result.note}"
    note += unfit
    if best is None and unfit and result.status is Found.OPTIMAL:
        return SolverOutput(None, Status.NO_PLAN, bound, f"{note}: no plan that fits was found")
    if best is None:
        return SolverOutput(
            None, Status.TIMEOUT, bound, f"{note}: the limit was reached before any plan was found"
        )
    if proven:
        return SolverOutput(best[1], Status.OPTIMAL, min(best[0], bound or best[0]), note)
    if not found_better:
        note = f"the best starting plan ({note}, nothing faster found)"
    return SolverOutput(best[1], Status.FEASIBLE, bound, note, stopped=True)
