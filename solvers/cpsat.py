"""OR-Tools CP-SAT back-end: a direct translation of `solvers.formulation`.

CP-SAT has every construct natively (enforcement literals, max-equalities,
optional intervals, a cumulative resource), so this file is only a
dictionary from our constraint kinds to its calls.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

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


def solve_cpsat(
    form: Formulation,
    *,
    time_limit: float | None,
    threads: int,
    seed: int,
    hint: list[int] | None,
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
    if hint is not None:
        for x, value in zip(xs, hint, strict=True):
            model.add_hint(x, value)

    solver = cp_model.CpSolver()
    params = solver.parameters
    if time_limit is not None:
        params.max_time_in_seconds = max(0.01, time_limit)
    params.num_workers = max(1, threads)
    params.random_seed = seed
    # NOTE: interleaved search makes multi-worker runs reproducible for a
    # given seed and thread count (a race between parallel workers is not).
    params.interleave_search = True
    params.log_search_progress = False
    code = solver.solve(model)
    if code == cp_model.OPTIMAL:
        status = "optimal"
    elif code == cp_model.FEASIBLE:
        status = "feasible"
    elif code == cp_model.INFEASIBLE:
        return BackendResult("infeasible", None, None, None)
    else:
        return BackendResult("unknown", None, None, solver.best_objective_bound)
    values = [int(solver.value(x)) for x in xs]
    return BackendResult(status, values, solver.objective_value, solver.best_objective_bound)
