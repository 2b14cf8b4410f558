"""The plan model as a linear MIP (for the PuLP back-ends: CBC, HiGHS, Gurobi, CPLEX).

The translation of the IR into linear rows:

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

Times are continuous, in the linear units of `solvers.model` (the horizon
is `LINEAR_HORIZON` units). "Strictly after" is `EPSILON` units (1e-7 of
the horizon): a tensor starting less than that after a check point is
counted there, which can only make the model more cautious, never break the
budget. Memory stays in the model's exact units.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pulp

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
    from solvers.model import Formulation

EPSILON = 1.0e-3
INTEGRALITY_TOLERANCE = 1.0e-9


def _bounds(form: Formulation, ex: Expr, scale: float = 1.0) -> tuple[float, float]:
    lo = hi = ex.const / scale
    for v, c in ex.terms:
        var = form.model.vars[v]
        vlo, vhi = (var.lo, var.hi) if var.is_bool else (var.lo / scale, var.hi / scale)
        lo += min(c * vlo, c * vhi)
        hi += max(c * vlo, c * vhi)
    return lo, hi


def build_lp(
    form: Formulation, hint: Sequence[int] | None, objective_at_most: int | None = None
) -> tuple[pulp.LpProblem, list]:
    """The PuLP problem and its variables (index-aligned with the formulation's)."""
    m = form.model
    scale = form.times.ticks_per_linear_unit
    prob = pulp.LpProblem("planopt", pulp.LpMinimize)
    xs = []
    for i, v in enumerate(m.vars):
        if v.is_bool:
            x = pulp.LpVariable(f"x{i}", cat=pulp.LpBinary)
            if (v.lo, v.hi) != (0, 1):
                # NOTE: PuLP sets a binary's bounds to [0, 1] whatever it is given,
                # so a decision a restricted model rules out (swap-only's
                # recompute: its upper bound 0) is a row; without it swap-only on
                # CBC and HiGHS returned plans that recompute.
                prob.addConstraint(x >= v.lo, f"fix{i}lo")
                prob.addConstraint(x <= v.hi, f"fix{i}hi")
        else:
            x = pulp.LpVariable(f"x{i}", lowBound=v.lo / scale, upBound=v.hi / scale)
        if hint is not None:
            x.setInitialValue(hint[i] if v.is_bool else hint[i] / scale)
        xs.append(x)
    fresh = iter(range(10**9))
    start = _Start(hint)

    def lit(x: Lit):
        return xs[x[0]] if x[1] else 1 - xs[x[0]]

    def lin(ex: Expr):
        return pulp.lpSum(c * xs[v] for v, c in ex.terms) + ex.const

    def tlin(ex: Expr):
        """A time-valued expression in linear units."""
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
            start.select(
                selectors,
                [tlin(ex) for ex, _ in c.terms],
                [None if when is None else lit(when) for _, when in c.terms],
            )
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
            start.set(lasts, start.after(xs[iva.end], xs[iva.start], 0.0))
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
            start.cover(p, q, o, present, xs[ivb.start], xs[ivb.end], xs[iva.start])
            load.append(ivb.demand * o)
        slack = 0 if iva.present is None else total * (1 - lit(iva.present))
        add(pulp.lpSum(load) <= m.capacity + slack)
    if objective_at_most is not None:
        add(xs[m.objective] <= objective_at_most / scale)
    prob += xs[m.objective]
    return prob, xs


class _Start:
    """The values of the translation's own variables (selectors, p, q, o, lasts) implied by
    a hint, so that the back-end receives a complete MIP start.

    NOTE (issue 25, item 3): with only the plan model's variables set, CBC
    rejected every warm start ("mipstart values could not be used to build a
    solution": it fixes the integers it is given, the others at 0) and
    searched without an incumbent; on a 4-layer chain at its minimum budget
    it stopped after 2,000 nodes with a plan 14% slower than the hint.
    Values follow the rows exactly (in the rows' own linear units), so the
    hint's plan is a solution of the linear model whenever it fits there.
    """

    def __init__(self, hint: Sequence[int] | None) -> None:
        self.on = hint is not None

    def set(self, x, value: float) -> None:
        if self.on:
            x.setInitialValue(value)

    def after(self, later, earlier, gap: float) -> int:
        """1 when `later - earlier > gap` at the hint (0 without a hint)."""
        if not self.on:
            return 0
        return int(later.varValue - earlier.varValue > gap)

    def select(self, selectors: list, terms: list, whens: list) -> None:
        """`target == max(0, present terms)`: the selector of the largest present term
        (the first, `floor`, when none is above 0)."""
        if not self.on:
            return
        best, chosen = 0.0, selectors[0]
        for sel, term, when in zip(selectors[1:], terms, whens, strict=True):
            present = when is None or pulp.value(when) > 0.5
            value = pulp.value(term)
            if present and value > best:
                best, chosen = value, sel
        for sel in selectors:
            sel.setInitialValue(1 if sel is chosen else 0)

    def cover(self, p, q, o, present, b_start, b_end, a_start) -> None:
        """`p = [start_b <= start_a]`, `q = [end_b > start_a]`, `o` their conjunction."""
        if not self.on:
            return
        pv = 1 - self.after(b_start, a_start, EPSILON - 1e-12)
        qv = self.after(b_end, a_start, 0.0)
        p.setInitialValue(pv)
        q.setInitialValue(qv)
        o.setInitialValue(max(0.0, pv + qv - 1 - pulp.value(present)))


def read_solution(form: Formulation, prob: pulp.LpProblem, xs: list) -> BackendResult:
    """The result PuLP reports after a solve (objective in ticks; no bound, no work)."""
    scale = form.times.ticks_per_linear_unit
    status = pulp.LpStatus[prob.status]
    sol_status = getattr(prob, "sol_status", None)
    if status == "Infeasible":
        return BackendResult(Status.INFEASIBLE)
    has_solution = status == "Optimal" or sol_status in (
        pulp.LpSolutionIntegerFeasible,
        pulp.LpSolutionOptimal,
    )
    if not has_solution or xs[form.model.objective].varValue is None:
        return BackendResult(Status.UNKNOWN)
    values = [
        round(x.varValue or 0.0) if v.is_bool else round((x.varValue or 0.0) * scale)
        for x, v in zip(xs, form.model.vars, strict=True)
    ]
    objective = pulp.value(prob.objective) * scale
    proven = status == "Optimal" and sol_status in (None, pulp.LpSolutionOptimal)
    if proven:
        return BackendResult(Status.OPTIMAL, values, objective, objective)
    return BackendResult(Status.FEASIBLE, values, objective, None)
