"""OR-Tools CP-SAT back-end: a direct translation of the model IR, solved in a forked child.

CP-SAT has every construct natively (enforcement literals, max-equalities,
optional intervals, a cumulative resource), so the translation is only a
dictionary from our constraint kinds to its calls. Work is CP-SAT's own
deterministic time (`max_deterministic_time`, the response's
`deterministic_time`), `UNITS_PER_DETERMINISTIC_SECOND` counts each.

NOTE (determinism, measured and documented in docs/solvers.md): one worker
is a sequential search, so with a work limit and no binding time limit
the same model, hint and seed give the same solution on any machine. More
workers race unless `interleave_search` is on (then CP-SAT runs its
subsolvers in fixed batches: deterministic for any worker count).
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ortools.sat.python import cp_model

from planopt.errors import SolverCrashError
from solvers.backends.base import BackendResult, Status
from solvers.model.ir import (
    AndEq,
    Clause,
    Define,
    ExactlyOne,
    Expr,
    GeqReify,
    Linear,
    Lit,
    MaxEq,
)

if TYPE_CHECKING:
    from planopt.work import WorkMeter
    from solvers.model import Formulation

# Counts per second of CP-SAT's deterministic time. NOTE (issue 25): one worker
# on the plan models (exact, recompute-only and swap-only on 21-40-layer
# chains) took 3.35-3.6 CPU-seconds of the reference machine per
# deterministic second, not the 1 that OR-Tools aims at; taken 1:1 it made a
# unit of the exact methods cost 2.1-3.6 CPU-seconds.
UNITS_PER_DETERMINISTIC_SECOND = 3.4

# Settings tried in turn when a solve aborts (see `run_isolated`).
_ATTEMPTS: tuple[dict, ...] = ({}, {"keep_hint": False})


def translate(
    form: Formulation,
    hint: Sequence[int] | None,
    objective_at_most: int | None,
    memory: str = "cumulative",
) -> tuple[cp_model.CpModel, list] | None:
    """The CP-SAT model and its variables (index-aligned with the IR's); None when the
    capacity is negative (nothing fits).

    `memory` is how the memory resource is stated: `cumulative` (intervals
    on one cumulative resource, the default), `reservoir` (events: +demand at
    each present interval's start, -demand at its end, the running level in
    [0, capacity]) or `both` (each a redundant check of the other).
    experiments/exact_formulations.py compares them in work units.
    """
    m = form.model
    if m.capacity < 0:
        return None
    model = cp_model.CpModel()
    xs = [
        model.new_bool_var(v.name) if v.is_bool else model.new_int_var(v.lo, v.hi, v.name)
        for v in m.vars
    ]
    for i, v in enumerate(m.vars):
        if v.is_bool and v.hi == 0:
            model.add(xs[i] == 0)

    def lit(x: Lit):
        return xs[x[0]] if x[1] else xs[x[0]].Not()

    def lin(ex: Expr):
        return sum((c * xs[v] for v, c in ex.terms), ex.const)

    for c in m.constraints:
        if isinstance(c, Define):
            ct = model.add(xs[c.target] == lin(c.expr))
            if c.when is not None:
                ct.only_enforce_if(lit(c.when))
        elif isinstance(c, MaxEq):
            exprs = [0]
            for ex, when in c.terms:
                if when is None:
                    exprs.append(lin(ex))
                    continue
                aux = model.new_int_var(0, m.horizon, "")
                model.add(aux == lin(ex)).only_enforce_if(lit(when))
                model.add(aux == 0).only_enforce_if(lit(when).Not())
                exprs.append(aux)
            model.add_max_equality(xs[c.target], exprs)
        elif isinstance(c, AndEq):
            lits = [lit(x) for x in c.lits]
            model.add_bool_and(lits).only_enforce_if(xs[c.target])
            model.add_bool_or([x.Not() for x in lits]).only_enforce_if(xs[c.target].Not())
        elif isinstance(c, GeqReify):
            model.add(lin(c.expr) >= 0).only_enforce_if(xs[c.target])
            model.add(lin(c.expr) <= -1).only_enforce_if(xs[c.target].Not())
        elif isinstance(c, Clause):
            model.add_bool_or([lit(x) for x in c.lits])
        elif isinstance(c, ExactlyOne):
            model.add_exactly_one([lit(x) for x in c.lits])
        elif isinstance(c, Linear):
            expr = lin(c.expr)
            if c.lo is not None:
                model.add(expr >= c.lo)
            if c.hi is not None:
                model.add(expr <= c.hi)
        else:  # pragma: no cover - a new constraint kind must be translated here
            raise TypeError(f"CP-SAT back-end cannot translate {type(c).__name__}")

    if memory in ("reservoir", "both"):
        _add_reservoir(model, m, xs, lit)
    if memory not in ("cumulative", "reservoir", "both"):
        raise ValueError(f"memory must be cumulative, reservoir or both, got {memory!r}")
    intervals, demands = [], []
    for k, iv in enumerate(m.intervals if memory != "reservoir" else ()):
        size = model.new_int_var(0, m.horizon, f"len{k}")
        if iv.present is None:
            interval = model.new_interval_var(xs[iv.start], size, xs[iv.end], f"iv{k}")
        else:
            interval = model.new_optional_interval_var(
                xs[iv.start], size, xs[iv.end], lit(iv.present), f"iv{k}"
            )
        intervals.append(interval)
        demands.append(iv.demand)
    if intervals:
        model.add_cumulative(intervals, demands, m.capacity)
    model.minimize(xs[m.objective])
    if objective_at_most is not None:
        model.add(xs[m.objective] <= objective_at_most)
    if hint is not None:
        # NOTE: only the decision literals are hinted. A complete hint (times
        # included) made CP-SAT 9.15 abort ("Check failed: threshold > 0")
        # on a 4-layer chain; the solver completes the times itself.
        for v in form.decision_vars():
            model.add_hint(xs[v], hint[v])
    return model, xs


def _add_reservoir(model: cp_model.CpModel, m, xs: list, lit) -> None:
    """Memory as events: the level after every change at an instant stays within the
    capacity (frees and allocations at one instant net out, as in the spec)."""
    times, changes, actives = [], [], []
    for iv in m.intervals:
        active = model.new_constant(1) if iv.present is None else lit(iv.present)
        times += [xs[iv.start], xs[iv.end]]
        changes += [iv.demand, -iv.demand]
        actives += [active, active]
    if times:
        model.add_reservoir_constraint_with_active(times, changes, actives, 0, m.capacity)


def solve(
    form: Formulation,
    *,
    time_limit: float | None,
    work_limit: float | None,
    threads: int,
    seed: int,
    hint: Sequence[int] | None,
    objective_at_most: int | None = None,
    relative_gap: float = 0.0,
    meter: WorkMeter | None = None,
    interleave: bool = False,
) -> BackendResult:
    """Solve with CP-SAT (see `solvers.backends.base.SolveFn`).

    `interleave` runs several workers in CP-SAT's deterministic batches
    (measured far too slow on these models, see docs/solvers.md; kept for
    experiments): without it, more than one worker race.
    """
    translated = translate(form, hint, objective_at_most)
    if translated is None:
        return BackendResult(Status.INFEASIBLE, note="the budget leaves no room for tensors")
    model, xs = translated
    workers = max(1, threads)
    params = {
        "max_time_in_seconds": None if time_limit is None else max(0.01, time_limit),
        "max_deterministic_time": (
            None if work_limit is None else work_limit / UNITS_PER_DETERMINISTIC_SECOND
        ),
        "num_workers": workers,
        "random_seed": seed,
        "relative_gap_limit": relative_gap,
        "interleave_search": interleave,
    }
    code, values, objective, bound, seconds = run_isolated(model, xs, params)
    work = seconds * UNITS_PER_DETERMINISTIC_SECOND
    if meter is not None:
        meter.charge(work)
    note = _stopped_by(code, work, work_limit, time_limit)
    if code == cp_model.OPTIMAL:
        return BackendResult(Status.OPTIMAL, values, objective, bound, work, note)
    if code == cp_model.FEASIBLE:
        return BackendResult(Status.FEASIBLE, values, objective, bound, work, note)
    if code == cp_model.INFEASIBLE:
        return BackendResult(Status.INFEASIBLE, work_used=work)
    return BackendResult(Status.UNKNOWN, None, None, bound, work, note)


def _stopped_by(code, work: float, work_limit: float | None, time_limit: float | None) -> str:
    if code in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
        return ""
    # CP-SAT stops a little short of its deterministic limit (0.98 of it, seen).
    if work_limit is not None and (time_limit is None or work >= 0.9 * work_limit):
        return "stopped by its work limit"
    if time_limit is not None:
        return "stopped by its time limit"
    return ""


def _solve_here(model: cp_model.CpModel, xs: list, params: dict, attempt: dict):
    solver = cp_model.CpSolver()
    p = solver.parameters
    if params["max_time_in_seconds"] is not None:
        p.max_time_in_seconds = params["max_time_in_seconds"]
    if params["max_deterministic_time"] is not None:
        p.max_deterministic_time = params["max_deterministic_time"]
    p.num_workers = params["num_workers"]
    p.random_seed = params["random_seed"]
    p.relative_gap_limit = params["relative_gap_limit"]
    p.interleave_search = params["interleave_search"]
    p.log_search_progress = False
    # NOTE: with two workers the second one runs CP-SAT's interleaved helpers,
    # and the feasibility pump kept it busy for the whole limit (7 of 8 s on
    # a 32-layer chain) so no LNS ran; without it the median time to prove
    # five hard 32-layer chains fell (one from 19.8 s to 7.0 s).
    p.ignore_subsolvers.append("feasibility_pump")
    if not attempt.get("keep_hint", True):
        model.clear_hints()
    code = solver.solve(model)
    work = solver.response_proto.deterministic_time
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        values = [int(solver.value(x)) for x in xs]
        return code, values, solver.objective_value, solver.best_objective_bound, work
    return code, None, None, solver.best_objective_bound, work


def _child(conn, model, xs, params, attempt) -> None:  # pragma: no cover - runs in a fork
    try:
        conn.send(_solve_here(model, xs, params, attempt))
    finally:
        conn.close()


def run_isolated(model: cp_model.CpModel, xs: list, params: dict):
    """Solve in a forked child so an OR-Tools internal abort cannot kill the caller.

    NOTE: CP-SAT 9.13-9.15 abort the whole process ("Check failed: threshold
    > 0", "heuristics.fixed_search != nullptr") on some of our hinted models
    (reproduced on a 4-layer chain), hence the pin to 9.12 in pyproject; a
    crashed child is still retried once without the hint before a crash is
    reported. Without `fork` the solve runs in this process.
    """
    if "fork" not in mp.get_all_start_methods():
        return _solve_here(model, xs, params, _ATTEMPTS[0])
    ctx = mp.get_context("fork")
    for attempt in _ATTEMPTS:
        receiver, sender = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(sender, model, xs, params, attempt), daemon=True)
        proc.start()
        sender.close()
        try:
            result = receiver.recv()
        except EOFError:
            result = None
        proc.join()
        if result is not None:
            return result
    raise SolverCrashError(
        f"CP-SAT aborted {len(_ATTEMPTS)} times (an OR-Tools internal check failed); try "
        "another seed, threads=1 or another backend"
    )
