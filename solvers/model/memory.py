"""Memory: every tensor an interval on one cumulative resource of the budget's capacity.

Per layer `i`: its saved tensor from `F_i` until it is freed (kept: the end
of `B_i`; recomputed: the end of `F_{i+1}`; swapped: when both its copy out
and `F_{i+1}` have ended), again from its copy back or recomputation to the
end of `B_i`, and the forward, recomputation and backward scratch for the
length of their operations. An interval that may last zero time occupies
nothing then (free before allocate), as in the spec.
"""

from __future__ import annotations

import math

from planopt.profile import Profile
from solvers.model.backward import BackwardTimes
from solvers.model.decisions import DecisionVars
from solvers.model.forward import ForwardTimes
from solvers.model.ir import Define, Interval, Lit, MaxEq, Model, pos, var
from solvers.model.units import MemoryScale


def add_memory(
    m: Model,
    profile: Profile,
    budget: float,
    scale: MemoryScale,
    d: DecisionVars,
    fwd: ForwardTimes,
    bt: BackwardTimes,
    f: list[int],
    b: list[int],
    d_back: list[int],
) -> None:
    """The memory intervals and the capacity (in `scale`'s exact units; -1: nothing fits)."""
    layers = profile.layers
    n = len(layers)
    m.capacity = max(-1, math.floor(scale.capacity(budget, profile.static_bytes)))

    def interval(
        start: int,
        end: int,
        nbytes: int,
        present: Lit | None,
        min_len: int,
        in_forward: bool = False,
    ) -> None:
        # min_len: the least the interval can last (0: it may vanish).
        if nbytes > 0:
            m.intervals.append(
                Interval(start, end, scale.units(nbytes), present, in_forward, min_len == 0)
            )

    for i, layer in enumerate(layers):
        nxt = min(i + 1, n - 1)
        s = layer.product_bytes
        saved_free = m.time(f"s{i}.free")
        m.add(Define(saved_free, var(bt.end[i]), pos(d.keep[i])))
        m.add(Define(saved_free, var(fwd.end[nxt]), pos(d.rec[i])))
        swap_free = m.time(f"s{i}.swapfree")
        m.add(MaxEq(swap_free, ((var(fwd.out_end[i]), None), (var(fwd.end[nxt]), None))))
        m.add(Define(saved_free, var(swap_free), pos(d.swap[i])))
        f_pair = f[i] + (f[nxt] if nxt != i else 0)
        interval(fwd.start[i], saved_free, s, None, f_pair, in_forward=True)
        interval(fwd.start[i], fwd.end[i], layer.fwd_work_bytes, None, f[i], in_forward=True)
        interval(bt.back_start[i], bt.end[i], s, pos(d.swap[i]), d_back[i] + b[i])
        interval(bt.rec_start[i], bt.end[i], s, pos(d.rec[i]), f[i] + b[i])
        interval(bt.rec_start[i], bt.rec_end[i], layer.fwd_work_bytes, pos(d.rec[i]), f[i])
        interval(bt.start[i], bt.end[i], layer.bwd_work_bytes, None, b[i])
