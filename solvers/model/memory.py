"""Memory: every tensor an interval on one cumulative resource of the budget's capacity.

Spec v2, per layer `i`: its internals from `F_i` until freed (kept: the end
of `B_i`; recomputed: the end of `F_i`; swapped: when both its copy out and
`F_i` have ended), again from their copy back or recomputation to the end of
`B_i`; its output `x_{i+1}` from `F_i` to its forward use (`F_{i+1}`) or, when
held, to its last backward reader (`B_i`, else `B_{i+1}`, else the block of
the run above, to the end of its first forward), again from its copy back or
regeneration to that reader; the gradient `g_i` from `B_i` to the end of
`B_{i-1}`; parameter gradients from `B_i` past the end of the step; and the
forward, recomputation and backward scratch for the length of their
operations. An interval that may last zero time occupies nothing then (free
before allocate), as in the spec.

Cost model v3 (a partial layer with option k): its kept `h_k` bytes follow
the internals' rules; the dropped `s_i - h_k` live for `F_i` only and again
from `R_i` to the end of `B_i`, with the regeneration's scratch during `R_i`;
its input is read to the end of `B_i`. A negative backward scratch (12.6)
enters as its complement (`_add_signed_scratch`), so demands stay >= 0.
"""

from __future__ import annotations

import math

from planopt.profile import Profile
from solvers.model.backward import BackwardTimes
from solvers.model.decisions import DecisionVars, conj, negate
from solvers.model.forward import ForwardTimes
from solvers.model.ir import AndEq, Define, Interval, Lit, MaxEq, Model, const, neg, pos, var
from solvers.model.reads import Reads
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
    reads: Reads,
    after_end: int,
) -> None:
    """The memory intervals and the capacity (in `scale`'s exact units; -1: nothing fits).

    `after_end`: a time one tick past the makespan, where parameter gradients
    are freed (they are held to the end of the step, that instant included).
    """
    layers = profile.layers
    n = len(layers)
    m.capacity = max(-1, math.floor(scale.capacity(budget, profile.static_bytes)))
    keep, swap, rec = d.keep, d.swap, d.rec
    e = bt.end

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

    def both(a: Lit, b: Lit, name: str) -> Lit:
        v = m.new_bool(name)
        m.add(AndEq(v, (a, b)))
        return pos(v)

    signed: list[tuple[int, int]] = []  # (layer, bytes) of each negative backward scratch
    for i, layer in enumerate(layers):
        nxt = min(i + 1, n - 1)
        last = i == n - 1
        fwd_use = fwd.end[nxt]  # the output's forward use: F_{i+1} (F_i for the last layer)
        f_pair = f[i] + (f[nxt] if nxt != i else 0)
        # Internals: to B_i when kept, to the later of copy out and F_i when swapped.
        opts = list(zip(d.opt[i], layer.options, strict=False)) if d.opt else []
        whole = d.whole(i)
        if layer.saved_bytes > 0:
            int_free = m.time(f"int{i}.free")
            int_swapfree = m.time(f"int{i}.swapfree")
            m.add(MaxEq(int_swapfree, ((var(fwd.out_end[i]), None), (var(fwd.end[i]), None))))
            m.add(Define(int_free, var(e[i]), pos(keep[i])))
            m.add(Define(int_free, var(fwd.end[i]), pos(rec[i])))
            m.add(Define(int_free, var(int_swapfree), pos(swap[i])))
            interval(fwd.start[i], int_free, layer.saved_bytes, whole, f[i], in_forward=True)
            back = reads.back_internal[i] + b[i]
            swap_whole = conj(m, [pos(swap[i]), whole], f"swapwhole{i}")
            interval(bt.back_start[i], e[i], layer.saved_bytes, swap_whole, back)
            interval(bt.rec_start[i], e[i], layer.saved_bytes, pos(rec[i]), f[i] + b[i])
            for k, (v, o) in enumerate(opts):
                dropped = layer.saved_bytes - o.saved_bytes
                interval(fwd.start[i], int_free, o.saved_bytes, pos(v), f[i], in_forward=True)
                interval(fwd.start[i], fwd.end[i], dropped, pos(v), f[i], in_forward=True)
                swap_k = conj(m, [pos(swap[i]), pos(v)], f"swapopt{i}_{k}")
                interval(bt.back_start[i], e[i], o.saved_bytes, swap_k, b[i])
        regen_start = bt.regen_start[i] if bt.regen_start else None
        for v, o in opts:
            assert regen_start is not None
            dropped = layer.saved_bytes - o.saved_bytes
            interval(regen_start, e[i], dropped, pos(v), b[i])
            interval(regen_start, bt.start[i], o.regen_work_bytes, pos(v), 0)
        # The output: its last backward reader is B_i, else B_{i+1}, else the
        # block above (which reads it to the end of its first forward).
        rin = d.reads_in[i + 1] if d.reads_in else reads.saves_input[i + 1]
        if reads.saves_output[i]:
            reader: int | None = e[i]
        elif rin is True:
            reader = e[i + 1]
        elif not last:
            reader = bt.rec_end[i + 1]  # read only when layer i+1 is recompute (or partial)
        else:
            reader = None
        out_free = m.time(f"out{i}.free")
        m.add(Define(out_free, var(fwd_use), pos(rec[i])))
        swap_free = m.time(f"out{i}.swapfree")
        m.add(MaxEq(swap_free, ((var(fwd.out_end[i]), None), (var(fwd_use), None))))
        back_reads: list[tuple[int, Lit | None]] = []  # (reader's end, when) of a copy back
        if reads.saves_output[i] or rin is True:
            m.add(Define(out_free, var(reader), pos(keep[i])))
            m.add(Define(out_free, var(swap_free), pos(swap[i])))
            back_reads.append((reader, pos(swap[i])))
        elif reader is not None:  # read by the block above if i+1 is recompute (v3: or R_{i+1})
            kept_read = both(pos(keep[i]), pos(rec[i + 1]), f"keepread{i}")
            m.add(Define(out_free, var(reader), kept_read))
            swap_read = both(pos(swap[i]), pos(rec[i + 1]), f"swapread{i}")
            back_reads.append((reader, swap_read))
            unread = [neg(rec[i + 1])]
            if rin is not False:  # a partial layer i+1 reads it to the end of B_{i+1}
                m.add(Define(out_free, var(e[i + 1]), conj(m, [pos(keep[i]), rin], f"kin{i}")))
                back_reads.append((e[i + 1], conj(m, [pos(swap[i]), rin], f"sin{i}")))
                unread.append(negate(rin))
            kept_unread = conj(m, [pos(keep[i]), *unread], f"keepunread{i}")
            m.add(Define(out_free, var(fwd_use), kept_unread))
            read = fwd.out_read[i] if fwd.out_read else pos(rec[i + 1])
            assert read is not True and read is not False
            m.add(Define(out_free, var(swap_free), conj(m, [pos(swap[i]), read], f"sr{i}")))
            swap_unread = conj(m, [pos(swap[i]), *unread], f"swapunread{i}")
            m.add(Define(out_free, var(fwd_use), swap_unread))
        else:  # the last layer's output with no reader
            m.add(Define(out_free, var(fwd_use), pos(keep[i])))
            m.add(Define(out_free, var(fwd_use), pos(swap[i])))
        interval(fwd.start[i], out_free, layer.out_bytes, None, f_pair, in_forward=True)
        for end, when in back_reads:
            interval(bt.back_start[i], end, layer.out_bytes, when, 0)
        # Regenerated in a block: the output to its last reader (B_i, else
        # B_{i+1}), else to the end of its forward use in the block.
        regen_free = m.time(f"regen{i}.free")
        if reads.saves_output[i]:
            m.add(Define(regen_free, var(e[i]), None))
        elif rin is True:
            m.add(Define(regen_free, var(e[i + 1]), None))
        elif last:
            m.add(Define(regen_free, var(bt.rec_end[i]), None))
        else:
            m.add(Define(regen_free, var(bt.rec_end[i + 1]), pos(rec[i + 1])))
            idle = [neg(rec[i + 1])]
            if rin is not False:
                m.add(Define(regen_free, var(e[i + 1]), rin))
                idle.append(negate(rin))
            m.add(Define(regen_free, var(bt.rec_end[i]), conj(m, idle, f"regenidle{i}")))
        interval(bt.rec_start[i], regen_free, layer.out_bytes, pos(rec[i]), 0)
        interval(fwd.start[i], fwd.end[i], layer.fwd_work_bytes, None, f[i], in_forward=True)
        interval(bt.rec_start[i], bt.rec_end[i], layer.fwd_work_bytes, pos(rec[i]), f[i])
        if layer.bwd_work_bytes >= 0:
            interval(bt.start[i], e[i], layer.bwd_work_bytes, None, b[i])
        elif b[i] > 0:  # v3 (12.6); an empty B_i's scratch occupies nothing
            signed.append((i, -layer.bwd_work_bytes))
        # Gradients: g_i from B_i to the end of B_{i-1}; parameter gradients to the end.
        if i > 0:
            interval(bt.start[i], e[i - 1], layer.input_grad_bytes, None, b[i] + b[i - 1])
        interval(bt.start[i], after_end, layer.param_grad_bytes, None, 1)
    _add_signed_scratch(m, signed, scale, bt, sum(f))


def _add_signed_scratch(
    m: Model, signed: list[tuple[int, int]], scale: MemoryScale, bt: BackwardTimes, forward: int
) -> None:
    """Each negative scratch `-W` of `B_i` (12.6: the level inside `B_i` is `W` lower)
    as its complement: `W` on `[0, start of B_i)` and on `[end of B_i, horizon)`, with
    the capacity raised by `W`. The resource then counts the true level plus the sum
    of the `W` at every instant (`Model.memory_offset`), so a level fits exactly when
    it did; every demand stays non-negative, as CP-SAT's cumulative and the linear
    back-ends' checks (one per allocation, which only the non-negative make enough)
    need. Half-open intervals: at the start of `B_i` the level is already `W` lower,
    at its end it is back (every decrease first, the level after all of them).
    """
    if not signed:
        return
    zero = m.new("mem.zero", 0, 0)
    horizon = m.new("mem.horizon", m.horizon, m.horizon)
    m.add(Define(zero, const(0), None))
    m.add(Define(horizon, const(m.horizon), None))
    offset = 0
    for i, nbytes in signed:
        units = scale.units(nbytes)
        offset += units
        # B_i starts after the whole forward; the horizon lies past the makespan.
        m.intervals.append(Interval(zero, bt.start[i], units, None, True, forward == 0))
        m.intervals.append(Interval(bt.end[i], horizon, units, None, False, False))
    m.memory_offset = offset
    if m.capacity >= 0:
        m.capacity += offset
