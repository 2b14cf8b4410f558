"""Implied rows that only strengthen a solver's relaxation of the plan model.

The compute-stream row is always added (it helps the LP bound of the
linear back-ends); the rest (`add_relaxation_cuts`) are the rows of
`solvers.model.relaxation` in ticks and memory units, off by default
until measured: on a 16-layer chain they lifted CP-SAT's bound from 0 to
0.7% overhead (the optimum lies near 6%) without proving more.
"""

from __future__ import annotations

from planopt.profile import Profile
from solvers.model.decisions import DecisionVars
from solvers.model.ir import Expr, Linear, Model, var
from solvers.model.units import MemoryScale


def add_compute_stream_row(m: Model, end: int, rec: list[int], f: list[int], b: list[int]) -> None:
    """The compute stream alone runs every forward, backward and recomputation."""
    n = len(f)
    recompute = Expr(tuple((rec[j], f[j]) for j in range(n)))
    m.add(Linear(var(end) - recompute, sum(f) + sum(b), None, in_ticks=True))


def add_relaxation_cuts(
    m: Model,
    profile: Profile,
    end: int,
    d: DecisionVars,
    f: list[int],
    b: list[int],
    d_out: list[int],
    d_back: list[int],
    scale: MemoryScale,
) -> None:
    """Implied constraints of `solvers.model.relaxation`, in ticks and memory units.

    Copies back run one at a time, none before the forward pass ends, and all
    of layers >= t end before `B_t`; a swapped layer's copy out and back sit
    between `F_t` and `B_t`; kept tensors below a layer are alive during its
    forward and backward. The exact model implies each of them, but its LP
    relaxation does not see them.
    """
    n = len(f)
    keep, swap = d.keep, d.swap
    cap = m.capacity - m.memory_offset
    forward = sum(f)
    for t in range(n):
        tail = sum(b[: t + 1])
        backs = Expr(tuple((swap[i], d_back[i]) for i in range(t, n)))
        m.add(Linear(var(end) - backs, forward + tail, None, in_ticks=True))
        m.add(
            Linear(
                var(end) - Expr(((swap[t], d_out[t] + d_back[t]),)),
                sum(f[: t + 1]) + tail,
                None,
                in_ticks=True,
            )
        )
    s = [scale.units(layer.product_bytes) for layer in profile.layers]
    for i, layer in enumerate(profile.layers):
        if layer.fwd > 0 and i >= 2:
            kept = Expr(tuple((keep[j], s[j]) for j in range(i - 1) if s[j]))
            room = cap - s[i - 1] - s[i] - scale.units(layer.fwd_work_bytes)
            if kept.terms:
                m.add(Linear(kept, None, room))
        if layer.bwd > 0 and i >= 1:
            kept = Expr(tuple((keep[j], s[j]) for j in range(i) if s[j]))
            if kept.terms:
                m.add(Linear(kept, None, cap - s[i] - scale.units(layer.bwd_work_bytes)))
