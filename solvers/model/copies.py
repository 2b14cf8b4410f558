"""The copy-back queue (H2D): FIFO slots in a fixed order, so the model stays functional.

A swapped layer's copy back is enqueued at the issue of its prefetch step,
higher layer first, and waits for its own copy out. The queue is walked in
its fixed order of `(step, layer)` slots; slot `(j, x)` is used when `x`'s
prefetch step is `j`, and `h2d_free` carries the engine's free time along.
A layer allowed a single prefetch step (outside a search window) has a
single slot, so the queue grows with the choices left, not with L^2.
"""

from __future__ import annotations

from solvers.model.backward import BackwardTimes
from solvers.model.decisions import DecisionVars
from solvers.model.forward import ForwardTimes, copy_cases
from solvers.model.ir import Define, Expr, MaxEq, Model, const, neg, pos, var
from solvers.model.reads import Reads


def add_copy_back_queue(
    m: Model, d: DecisionVars, fwd: ForwardTimes, bt: BackwardTimes, reads: Reads
) -> Expr:
    """Copies back through the one H2D engine; returns when it is free after the last.

    A copy back brings the output too when a backward reads it (when layer
    `x + 1` is recomputed, for an output only that run's block reads).
    """
    n = reads.n
    h2d: Expr = const(0)
    for j in range(n - 1, -1, -1):
        for x in range(j, -1, -1):
            if j not in d.prefetch[x]:
                continue  # x is never fetched at step j: its slot stays empty
            used = d.prefetch[x][j]
            start = m.time(f"slot{j}_{x}.start")
            ready = (var(bt.issue[j]), None), (h2d, None), (var(fwd.out_end[x]), None)
            m.add(MaxEq(start, ready))
            m.add(Define(bt.back_start[x], var(start), pos(used)))
            after = m.time(f"h2d_free{j}_{x}")
            m.add(Define(after, var(bt.back_end[x]), pos(used)))
            m.add(Define(after, h2d, neg(used)))
            h2d = var(after)
    for x in range(n):
        m.add(Define(bt.back_start[x], const(0), neg(d.swap[x])))
        start = var(bt.back_start[x])
        whole = (reads.back_full[x], reads.back_internal[x])
        opts = [*zip(reads.opt_back_full[x], reads.opt_back_internal[x], strict=True)]
        for lit, ticks in copy_cases(m, d, x, fwd.out_read[x], whole, opts):
            m.add(Define(bt.back_end[x], start + ticks, lit))
    return h2d
