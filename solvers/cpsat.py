"""OR-Tools CP-SAT back-end: a direct translation of `solvers.formulation`.

CP-SAT has every construct natively (enforcement literals, max-equalities,
optional intervals, a cumulative resource), so this file is only a
dictionary from our constraint kinds to its calls.
"""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass

from ortools.sat.python import cp_model

from planopt.errors import SolverCrashError
from solvers.formulation import (
    AndEq,
    Clause,
    Define,
    ExactlyOne,
    Expr,
    Formulation,
    GeqReify,
    Linear,
    Lit,
    MaxEq,
)


@dataclass(frozen=True)
class BackendResult:
    """What a back-end found: status word, values of all variables, objective and bound."""

    status: str  # "optimal", "feasible", "infeasible", "unknown"
    values: list[int] | None
    objective: float | None
    bound: float | None
    work_used: float = 0.0  # CP-SAT's deterministic time


def solve_cpsat(
    form: Formulation,
    *,
    time_limit: float | None,
    threads: int,
    seed: int,
    hint: list[int] | None,
    objective_at_most: int | None = None,
    relative_gap: float = 0.0,
    work_limit: float | None = None,
) -> BackendResult:
    m = form.model
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

    intervals, demands = [], []
    for k, iv in enumerate(m.intervals):
        size = model.new_int_var(0, m.horizon, f"len{k}")
        if iv.present is None:
            interval = model.new_interval_var(xs[iv.start], size, xs[iv.end], f"iv{k}")
        else:
            interval = model.new_optional_interval_var(
                xs[iv.start], size, xs[iv.end], lit(iv.present), f"iv{k}"
            )
        intervals.append(interval)
        demands.append(iv.demand)
    if m.capacity < 0:
        return BackendResult("infeasible", None, None, None)
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

    params = {
        "max_time_in_seconds": None if time_limit is None else max(0.01, time_limit),
        "num_workers": max(1, threads),
        "random_seed": seed,
        "relative_gap_limit": relative_gap,
        "max_deterministic_time": work_limit,
    }
    code, values, objective, bound, work = run_isolated(model, xs, params)
    if code == cp_model.OPTIMAL:
        status = "optimal"
    elif code == cp_model.FEASIBLE:
        status = "feasible"
    elif code == cp_model.INFEASIBLE:
        return BackendResult("infeasible", None, None, None, work)
    else:
        return BackendResult("unknown", None, None, bound, work)
    return BackendResult(status, values, objective, bound, work)


# Settings tried in turn when a solve aborts (see `run_isolated`).
_ATTEMPTS: tuple[dict, ...] = ({}, {"keep_hint": False})


def _solve_here(model: cp_model.CpModel, xs: list, params: dict, attempt: dict):
    solver = cp_model.CpSolver()
    p = solver.parameters
    if params["max_time_in_seconds"] is not None:
        p.max_time_in_seconds = params["max_time_in_seconds"]
    p.num_workers = params["num_workers"]
    p.random_seed = params["random_seed"]
    p.relative_gap_limit = params["relative_gap_limit"]
    if params.get("max_deterministic_time") is not None:
        p.max_deterministic_time = params["max_deterministic_time"]
    # NOTE: interleaved search would make multi-worker runs reproducible, but
    # it was 100x slower on our models (and aborted with hints in 9.13+), so
    # the exact method gets reproducibility another way (see solvers.exact).
    p.interleave_search = False
    p.log_search_progress = False
    # NOTE: with two workers the second one runs CP-SAT's interleaved helpers,
    # and the feasibility pump kept it busy for the whole limit (7 of 8 s on
    # a 32-layer chain) so no LNS ran; without it the median time to prove
    # five hard 32-layer chains fell (one from 19.8 s to 7.0 s).
    p.ignore_subsolvers.append("feasibility_pump")
    if not attempt.get("keep_hint", True):
        model.clear_hints()
    code = solver.solve(model)
    values = None
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        values = [int(solver.value(x)) for x in xs]
        return (
            code,
            values,
            solver.objective_value,
            solver.best_objective_bound,
            solver.response_proto.deterministic_time,
        )
    return code, None, None, solver.best_objective_bound, solver.response_proto.deterministic_time


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
        "another seed, "
        "threads=1 or another backend"
    )
