"""Linear MIP back-ends through PuLP: CBC (bundled), HiGHS, and Gurobi/CPLEX where installed.

The translation of `solvers.formulation` into linear constraints:

* `Define` under a literal and `GeqReify`: big-M, with M computed per
  constraint from the variables' bounds (tight M, fewer numerical troubles);
* `MaxEq`: `target >= every present term` and one selector binary per term
  saying which term the target equals;
* the memory resource: one check at the start of every interval `a` (its own
  demand counted only if it lasts, as an empty interval occupies nothing); for
  each interval `b` that may cover that instant, binaries `p = [start_b <=
  start_a]` and `q = [end_b > start_a]` force a continuous `o >= p + q - 1`
  (and `b` present) into the sum `d_a + sum d_b * o <= capacity`. Ticks are
  integral, so "strictly after" is "at least one tick after".

Times are continuous variables rescaled so the horizon is `MIP_HORIZON`
units (a big-M of ~1e4 keeps the integrality tolerance from opening holes:
with M = 1e7 ticks a binary at 1e-7 "counts as 0" and a tensor vanishes from
a memory check). "Strictly after" is `EPSILON` units (1e-7 of the horizon):
a tensor starting less than that after a check point is counted there,
which can only make the model more cautious, never break the budget.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import tempfile

import pulp

from solvers.cpsat import BackendResult
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
from solvers.highs import fresh_thread_pool
from solvers.watchdog import stop_children_after

MIP_HORIZON = 1.0e4
EPSILON = 1.0e-3
INTEGRALITY_TOLERANCE = 1.0e-9
# Seconds CBC gets to write its plan after the watchdog's SIGINT, before SIGKILL.
CBC_KILL_AFTER = 2.0
# NOTE: CBC runs single-threaded whatever `threads` says. With 2 threads it
# once claimed as optimal a plan 4.5% slower than one CP-SAT, HiGHS and a
# single-threaded CBC all found (a 6-layer chain, seed 1000 at 50%), and its
# parallel search is not reproducible run to run.
CBC_MAX_THREADS = 1


def cbc_kill_after(time_limit: float) -> float:
    """Seconds between the watchdog's SIGINT and SIGKILL, so that a solve ends
    within its limit's 10% (and 0.25 s) even when CBC ignores the SIGINT."""
    return min(CBC_KILL_AFTER, 0.05 * time_limit + 0.25)


def _bounds(form: Formulation, ex: Expr, scale: float = 1.0) -> tuple[float, float]:
    lo = hi = ex.const / scale
    for v, c in ex.terms:
        var = form.model.vars[v]
        vlo, vhi = (var.lo, var.hi) if var.is_bool else (var.lo / scale, var.hi / scale)
        lo += min(c * vlo, c * vhi)
        hi += max(c * vlo, c * vhi)
    return lo, hi


def build_lp(form: Formulation, hint: list[int] | None) -> tuple[pulp.LpProblem, list]:
    """The PuLP problem and its variables (index-aligned with the formulation's)."""
    m = form.model
    scale = max(1.0, m.horizon / MIP_HORIZON)  # ticks per MIP time unit
    prob = pulp.LpProblem("planopt", pulp.LpMinimize)
    xs = []
    for i, v in enumerate(m.vars):
        if v.is_bool:
            x = pulp.LpVariable(f"x{i}", lowBound=v.lo, upBound=v.hi, cat=pulp.LpBinary)
        else:
            x = pulp.LpVariable(f"x{i}", lowBound=v.lo / scale, upBound=v.hi / scale)
        if hint is not None:
            x.setInitialValue(hint[i] if v.is_bool else hint[i] / scale)
        xs.append(x)
    fresh = iter(range(10**9))

    def lit(x: Lit):
        return xs[x[0]] if x[1] else 1 - xs[x[0]]

    def lin(ex: Expr):
        return pulp.lpSum(c * xs[v] for v, c in ex.terms) + ex.const

    def tlin(ex: Expr):
        """A time-valued expression in MIP time units."""
        return pulp.lpSum(c * xs[v] for v, c in ex.terms) + ex.const / scale

    def add(constraint) -> None:
        prob.addConstraint(constraint, f"c{next(fresh)}")

    for c in m.constraints:
        if isinstance(c, Define):
            diff = Expr(((c.target, 1),)) - c.expr
            if c.when is None:
                add(tlin(diff) == 0)
                continue
            lo, hi = _bounds(form, diff, scale)
            add(tlin(diff) <= hi * (1 - lit(c.when)))
            add(tlin(diff) >= lo * (1 - lit(c.when)))
        elif isinstance(c, MaxEq):
            target = xs[c.target]
            selectors = []
            floor_sel = pulp.LpVariable(f"s{next(fresh)}", cat=pulp.LpBinary)
            selectors.append(floor_sel)
            add(target <= m.vars[c.target].hi / scale * (1 - floor_sel))
            for ex, when in c.terms:
                lo, hi = _bounds(form, ex, scale)
                big = m.horizon / scale + max(abs(lo), abs(hi))
                if when is None:
                    add(target >= tlin(ex))
                else:
                    add(target >= tlin(ex) - big * (1 - lit(when)))
                sel = pulp.LpVariable(f"s{next(fresh)}", cat=pulp.LpBinary)
                selectors.append(sel)
                add(target <= tlin(ex) + big * (1 - sel))
                if when is not None:
                    add(sel <= lit(when))
            add(pulp.lpSum(selectors) == 1)
        elif isinstance(c, AndEq):
            for x in c.lits:
                add(xs[c.target] <= lit(x))
            add(xs[c.target] >= pulp.lpSum(lit(x) for x in c.lits) - (len(c.lits) - 1))
        elif isinstance(c, GeqReify):
            lo, hi = _bounds(form, c.expr)
            add(lin(c.expr) >= lo * (1 - xs[c.target]))
            add(lin(c.expr) <= -1 + (hi + 1) * xs[c.target])
        elif isinstance(c, Clause):
            add(pulp.lpSum(lit(x) for x in c.lits) >= 1)
        elif isinstance(c, ExactlyOne):
            add(pulp.lpSum(lit(x) for x in c.lits) == 1)
        elif isinstance(c, Linear):
            div = scale if c.in_ticks else 1.0
            expr = (
                pulp.lpSum(
                    (coef / div if m.vars[v].is_bool else coef) * xs[v] for v, coef in c.expr.terms
                )
                + c.expr.const / div
            )
            if c.lo is not None:
                add(expr >= c.lo / div)
            if c.hi is not None:
                add(expr <= c.hi / div)
        else:  # pragma: no cover
            raise TypeError(f"MIP back-end cannot translate {type(c).__name__}")

    big_t = m.horizon / scale + 1
    total = sum(iv.demand for iv in m.intervals)
    for a, iva in enumerate(m.intervals):
        if iva.may_be_empty:
            # An empty interval occupies nothing: count its own demand only
            # when it lasts at least one tick.
            lasts = pulp.LpVariable(f"z{next(fresh)}", cat=pulp.LpBinary)
            add(xs[iva.end] - xs[iva.start] <= big_t * lasts)
            load = [iva.demand * lasts]
        else:
            load = [iva.demand]
        for b, ivb in enumerate(m.intervals):
            if b == a:
                continue
            # NOTE: an interval starting in backward never covers a forward
            # start except at the same instant, where the check at its own
            # start counts both; so that direction is skipped.
            if iva.in_forward and not ivb.in_forward:
                continue
            p = pulp.LpVariable(f"p{next(fresh)}", cat=pulp.LpBinary)
            q = pulp.LpVariable(f"q{next(fresh)}", cat=pulp.LpBinary)
            o = pulp.LpVariable(f"o{next(fresh)}", lowBound=0, upBound=1)
            add(xs[ivb.start] - xs[iva.start] >= EPSILON - big_t * p)
            add(xs[ivb.end] - xs[iva.start] <= big_t * q)
            present = 0 if ivb.present is None else 1 - lit(ivb.present)
            add(o >= p + q - 1 - present)
            load.append(ivb.demand * o)
        slack = 0 if iva.present is None else total * (1 - lit(iva.present))
        add(pulp.lpSum(load) <= m.capacity + slack)
    prob += xs[m.objective]
    return prob, xs


def _run(form: Formulation, solver, hint, *, log_bound: bool = False) -> BackendResult:
    prob, xs = build_lp(form, hint)
    if form.model.capacity < 0:
        return BackendResult("infeasible", None, None, None)
    prob.solve(solver)
    scale = max(1.0, form.model.horizon / MIP_HORIZON)
    status = pulp.LpStatus[prob.status]
    sol_status = getattr(prob, "sol_status", None)
    if status == "Infeasible":
        return BackendResult("infeasible", None, None, None)
    has_solution = status == "Optimal" or sol_status in (
        pulp.LpSolutionIntegerFeasible,
        pulp.LpSolutionOptimal,
    )
    values = None
    objective = None
    if has_solution and xs[form.model.objective].varValue is not None:
        values = [
            round(x.varValue or 0.0) if v.is_bool else round((x.varValue or 0.0) * scale)
            for x, v in zip(xs, form.model.vars, strict=True)
        ]
        objective = pulp.value(prob.objective) * scale
    proven = status == "Optimal" and sol_status in (None, pulp.LpSolutionOptimal)
    if values is None:
        return BackendResult("unknown", None, None, None)
    return BackendResult(
        "optimal" if proven else "feasible", values, objective, objective if proven else None
    )


def solve_cbc(
    form: Formulation, *, time_limit, threads: int, seed: int, hint, relative_gap: float = 0.0
) -> BackendResult:
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "cbc.log")
        solver = pulp.PULP_CBC_CMD(
            msg=False,
            gapRel=relative_gap,
            timeLimit=time_limit,
            threads=min(threads, CBC_MAX_THREADS),
            warmStart=hint is not None,
            # NOTE: CBC's preprocessing wrongly declares some of these models
            # infeasible (seen on 2-layer chains HiGHS and CP-SAT solve), so it is off.
            options=[
                f"randomCbcSeed {seed + 1}",
                f"integerTolerance {INTEGRALITY_TOLERANCE}",
                "preprocess off",
            ],
            logPath=log,
        )
        # CBC overruns its own limit at the root (see solvers.watchdog).
        kill_after = CBC_KILL_AFTER if time_limit is None else cbc_kill_after(time_limit)
        with stop_children_after("cbc", time_limit, kill_after=kill_after) as watch:
            try:
                result = _run(form, solver, hint)
            except pulp.PulpSolverError:
                if signal.SIGKILL not in watch.sent:
                    raise
                return BackendResult("unknown", None, None, None)  # killed: no plan from CBC
        if result.status == "feasible":
            bound = None
            with contextlib.suppress(OSError), open(log) as handle:
                text = handle.read()
                found = re.findall(r"best possible ([-0-9.e+]+)", text)
                if found:
                    bound = float(found[-1]) * max(1.0, form.model.horizon / MIP_HORIZON)
            return BackendResult(result.status, result.values, result.objective, bound)
        return result


def solve_highs(
    form: Formulation, *, time_limit, threads: int, seed: int, hint, relative_gap: float = 0.0
) -> BackendResult:
    solver = pulp.HiGHS(
        gapRel=relative_gap,
        msg=False,
        timeLimit=time_limit,
        threads=threads,
        random_seed=seed,
        mip_feasibility_tolerance=INTEGRALITY_TOLERANCE,
    )
    fresh_thread_pool()
    return _run(form, solver, hint)


def solve_gurobi(
    form: Formulation, *, time_limit, threads: int, seed: int, hint, relative_gap: float = 0.0
) -> BackendResult:
    solver = pulp.GUROBI(
        msg=False,
        gapRel=relative_gap,
        timeLimit=time_limit,
        warmStart=hint is not None,
        Threads=threads,
        Seed=seed,
    )
    return _run(form, solver, hint)


def solve_cplex(
    form: Formulation, *, time_limit, threads: int, seed: int, hint, relative_gap: float = 0.0
) -> BackendResult:
    solver = pulp.CPLEX_PY(
        msg=False,
        gapRel=relative_gap,
        timeLimit=time_limit,
        warmStart=hint is not None,
        threads=threads,
    )
    return _run(form, solver, hint)
