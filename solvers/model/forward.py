"""The forward pass and the copies out (D2H), as exact max-equalities.

`F_i` starts when `F_{i-1}` ends and, if some swapped layer `x` waits at
`i` (`swap_wait[x] == i`), when `x`'s copy out ends. The copy out of `i`
starts when `F_i` ends and the D2H engine is free (`d2h_free` carries the
engine's free time along the chain: a layer that is not swapped leaves it
as it was). A copy out takes longer when it also copies the layer's output,
which it does when a backward reads it (`solvers.model.reads`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from solvers.model.decisions import DecisionVars, Flag, conj, negate
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
    # Whether a backward reads layer i's output (so a swap copies it): fixed, or
    # "layer i+1 is recomputed or partial" (cost model v3).
    out_read: list[Flag] = field(default_factory=list)


def output_read(m: Model, d: DecisionVars, reads: Reads) -> list[Flag]:
    """Per layer, whether some backward step reads its output in the plan."""
    n = reads.n
    out: list[Flag] = []
    for i in range(n):
        rin = d.reads_in[i + 1]
        if reads.saves_output[i] or rin is True:
            out.append(True)
        elif i == n - 1:
            out.append(False)
        elif rin is False:
            out.append(pos(d.rec[i + 1]))
        else:
            neither = conj(m, [neg(d.rec[i + 1]), negate(rin)], f"outunread{i}")
            out.append(negate(neither) if neither is not None else True)
    return out


def copy_cases(
    m: Model,
    d: DecisionVars,
    i: int,
    read: Flag,
    whole: tuple[int, int],
    options: Sequence[tuple[int, int]],
) -> list[tuple[Lit | None, int]]:
    """A copy's duration under each case of the plan, as `(literal, ticks)`.

    `whole`: (with output, without) for the whole internals; `options`: the
    same per option of the menu (v3: a partial layer copies its kept subset).
    """
    # (a layer that may only be recomputed has no option literals: zip stops there)
    kinds = [(d.whole(i), whole), *((pos(v), t) for v, t in zip(d.opt[i], options, strict=False))]
    out: list[tuple[Lit | None, int]] = []
    for lit, (full, internal) in kinds:
        if read is True or read is False or full == internal:
            out.append((lit, full if read is not False else internal))
        else:
            out.append((conj(m, [lit, read], f"cp{i}_{len(m.vars)}"), full))
            out.append((conj(m, [lit, negate(read)], f"cp{i}_{len(m.vars)}"), internal))
    return out


def add_forward(m: Model, d: DecisionVars, f: list[int], reads: Reads) -> ForwardTimes:
    """Forward operations of durations `f` and their copies out (ticks)."""
    n = len(f)
    fs = [m.time(f"F{i}.start") for i in range(n)]
    fe = [m.time(f"F{i}.end") for i in range(n)]
    os_ = [m.time(f"out{i}.start") for i in range(n)]
    oe = [m.time(f"out{i}.end") for i in range(n)]
    d2h = [m.time(f"d2h_free{i}") for i in range(n)]
    read = output_read(m, d, reads)
    for i in range(n):
        terms: list[tuple[Expr, Lit | None]] = [] if i == 0 else [(var(fe[i - 1]), None)]
        for x in range(i):
            if i in d.wait[x]:
                terms.append((var(oe[x]), pos(d.wait[x][i])))
        m.add(MaxEq(fs[i], tuple(terms)))
        m.add(Define(fe[i], var(fs[i]) + f[i], None))
        prev_free = [] if i == 0 else [(var(d2h[i - 1]), None)]
        m.add(MaxEq(os_[i], ((var(fe[i]), None), *prev_free)))
        whole = (reads.out_full[i], reads.out_internal[i])
        opts = [*zip(reads.opt_out_full[i], reads.opt_out_internal[i], strict=True)]
        for lit, ticks in copy_cases(m, d, i, read[i], whole, opts):
            m.add(Define(oe[i], var(os_[i]) + ticks, lit))
        m.add(Define(d2h[i], var(oe[i]), pos(d.swap[i])))
        m.add(Define(d2h[i], var(d2h[i - 1]) if i else const(0), neg(d.swap[i])))
    return ForwardTimes(fs, fe, os_, oe, d2h, read)
