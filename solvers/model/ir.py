"""The formulation IR: integer variables, the constraint kinds every back-end translates, memory.

A `Model` is back-end neutral: CP-SAT (`solvers.backends.cpsat`) has every
kind natively, the linear back-ends (`solvers.backends.linear`) linearise
them with tight big-Ms. The kinds:

* `Define`: `target == expr`, when a literal holds (always, without one);
* `MaxEq`: `target == max(0, the present terms)`;
* `AndEq`: `target <=> every literal holds`;
* `GeqReify`: `target <=> expr >= 0`;
* `Clause`, `ExactlyOne`, `Linear` (bounds on an expression);
* `Interval`s on one cumulative memory resource of `Model.capacity`.

Every demand is non-negative (CP-SAT's cumulative takes no other). A
negative quantity (cost model v3's signed backward scratch, 12.6) is
stated as its complement: the resource then counts the true level plus
`Model.memory_offset`, which the capacity includes.

Every quantity is an integer in the units `solvers.model` states (time in
ticks, memory in exact units); a `Linear` row says whether it is time-valued
(`in_ticks`), so a back-end that rescales time rescales it too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

# A literal: (variable index, positive?).
Lit = tuple[int, bool]
# A linear expression's terms: ((variable index, coefficient), ...).
Terms = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Expr:
    """A linear expression with integer coefficients and constant."""

    terms: Terms = ()
    const: int = 0

    def __add__(self, other: Expr | int) -> Expr:
        if isinstance(other, int):
            return Expr(self.terms, self.const + other)
        return Expr(self.terms + other.terms, self.const + other.const)

    def __sub__(self, other: Expr | int) -> Expr:
        if isinstance(other, int):
            return Expr(self.terms, self.const - other)
        return Expr(self.terms + tuple((v, -c) for v, c in other.terms), self.const - other.const)


def var(index: int, coef: int = 1) -> Expr:
    return Expr(((index, coef),), 0)


def const(value: int) -> Expr:
    return Expr((), value)


def pos(v: int) -> Lit:
    return (v, True)


def neg(v: int) -> Lit:
    return (v, False)


@dataclass(frozen=True)
class Var:
    name: str
    lo: int
    hi: int
    is_bool: bool


@dataclass(frozen=True)
class Define:
    target: int
    expr: Expr
    when: Lit | None


@dataclass(frozen=True)
class MaxEq:
    target: int
    terms: tuple[tuple[Expr, Lit | None], ...]


@dataclass(frozen=True)
class AndEq:
    target: int
    lits: tuple[Lit, ...]


@dataclass(frozen=True)
class GeqReify:
    target: int
    expr: Expr


@dataclass(frozen=True)
class Clause:
    lits: tuple[Lit, ...]


@dataclass(frozen=True)
class ExactlyOne:
    lits: tuple[Lit, ...]


@dataclass(frozen=True)
class Linear:
    expr: Expr
    lo: int | None
    hi: int | None
    in_ticks: bool = False  # a time-valued constraint (back-ends may rescale time)


@dataclass(frozen=True)
class Interval:
    start: int
    end: int
    demand: int
    present: Lit | None
    in_forward: bool = False  # starts at some F_i start (MIP pruning uses it)
    may_be_empty: bool = False  # can last zero time (then it occupies nothing)


Constraint = Define | MaxEq | AndEq | GeqReify | Clause | ExactlyOne | Linear


@dataclass
class Model:
    """Variables, constraints, the memory resource and the objective (a variable).

    Mutable on purpose: the sections of `solvers.model.build` add to it in
    turn, and the exact method adds floors on the objective as it learns them.
    """

    vars: list[Var] = field(default_factory=list)
    constraints: list[Constraint] = field(default_factory=list)
    intervals: list[Interval] = field(default_factory=list)
    capacity: int = 0
    # Units the capacity (and every level the resource counts) carries on top of
    # the true level: the sum of the complemented negative demands (see above).
    memory_offset: int = 0
    objective: int = -1
    horizon: int = 0

    def new(self, name: str, lo: int, hi: int) -> int:
        self.vars.append(Var(name, lo, hi, False))
        return len(self.vars) - 1

    def new_bool(self, name: str) -> int:
        self.vars.append(Var(name, 0, 1, True))
        return len(self.vars) - 1

    def time(self, name: str) -> int:
        """A time variable in [0, horizon]."""
        return self.new(name, 0, self.horizon)

    def add(self, constraint: Constraint) -> None:
        self.constraints.append(constraint)


class HasModel(Protocol):
    model: Model


def evaluate(
    form: Model | HasModel, decisions: dict[int, int], stop: Callable[[], bool] | None = None
) -> list[int] | None:
    """Every variable's value implied by the decision literals (model order).

    The model is functional: given the plan, each defined variable follows
    from the others. Used to warm-start back-ends with a complete assignment
    and, in tests, to check the model against the simulator. `stop` is asked
    before each sweep (a caller's deadline: at 10^3 layers the sweeps took
    17 s of a 5 s limit); when it says yes there is no answer (None).
    """
    m = form if isinstance(form, Model) else form.model
    value = [0] * len(m.vars)
    for v, val in decisions.items():
        value[v] = val

    def lit(x: Lit | None) -> bool:
        return x is None or bool(value[x[0]]) == x[1]

    def ev(ex: Expr) -> int:
        return ex.const + sum(c * value[v] for v, c in ex.terms)

    # Creation order is not topological (an issue time is the end of a later
    # backward), so sweep until nothing changes; acyclic, so this terminates.
    for _ in range(len(m.vars) + 1):
        if stop is not None and stop():
            return None
        changed = False
        for c in m.constraints:
            if isinstance(c, Define):
                if not lit(c.when):
                    continue
                new = ev(c.expr)
            elif isinstance(c, MaxEq):
                new = max([0, *(ev(ex) for ex, w in c.terms if lit(w))])
            elif isinstance(c, AndEq):
                new = int(all(lit(x) for x in c.lits))
            elif isinstance(c, GeqReify):
                new = int(ev(c.expr) >= 0)
            else:
                continue
            if value[c.target] != new:
                value[c.target] = new
                changed = True
        if not changed:
            return value
    raise RuntimeError("model evaluation did not converge: the model has a cycle")
