"""The forward pass and the copies out (D2H), as exact max-equalities.

`F_i` starts when `F_{i-1}` ends and, if some swapped layer `x` waits at
`i` (`swap_wait[x] == i`), when `x`'s copy out ends. The copy out of `i`
starts when `F_i` ends and the D2H engine is free (`d2h_free` carries the
engine's free time along the chain: a layer that is not swapped leaves it
as it was). A copy out takes longer when it also copies the layer's output,
which it does when a backward reads it (`solvers.model.reads`).
"""

from __future__ import annotations

from dataclasses import dataclass

from solvers.model.decisions import DecisionVars
from solvers.model.ir import Define, Expr, Lit, MaxEq, Model, const, neg, pos, var
from solvers.model.reads import Reads


@dataclass(frozen=True)
class ForwardTimes:
    """Time variables of the forward pass: `F_i` start/end and copy out start/end."""

    start: list[int]
    end: list[int]
    out_start: list[int]
    out_end: list[int]
    d2h_free: list[int]  # when D2H is free after layer i's copy out (if any)


def add_forward(m: Model, d: DecisionVars, f: list[int], reads: Reads) -> ForwardTimes:
    """Forward operations of durations `f` and their copies out (ticks)."""
    n = len(f)
    fs = [m.time(f"F{i}.start") for i in range(n)]
    fe = [m.time(f"F{i}.end") for i in range(n)]
    os_ = [m.time(f"out{i}.start") for i in range(n)]
    oe = [m.time(f"out{i}.end") for i in range(n)]
    d2h = [m.time(f"d2h_free{i}") for i in range(n)]
    for i in range(n):
        terms: list[tuple[Expr, Lit | None]] = [] if i == 0 else [(var(fe[i - 1]), None)]
        for x in range(i):
            if i in d.wait[x]:
                terms.append((var(oe[x]), pos(d.wait[x][i])))
        m.add(MaxEq(fs[i], tuple(terms)))
        m.add(Define(fe[i], var(fs[i]) + f[i], None))
        prev_free = [] if i == 0 else [(var(d2h[i - 1]), None)]
        m.add(MaxEq(os_[i], ((var(fe[i]), None), *prev_free)))
        if reads.out_depends_on_block(i):  # the output is copied when i+1 is recompute
            m.add(Define(oe[i], var(os_[i]) + reads.out_full[i], pos(d.rec[i + 1])))
            m.add(Define(oe[i], var(os_[i]) + reads.out_internal[i], neg(d.rec[i + 1])))
        else:
            m.add(Define(oe[i], var(os_[i]) + reads.out_least(i), None))
        m.add(Define(d2h[i], var(oe[i]), pos(d.swap[i])))
        m.add(Define(d2h[i], var(d2h[i - 1]) if i else const(0), neg(d.swap[i])))
    return ForwardTimes(fs, fe, os_, oe, d2h)
