"""The one cost model: makespan and peak memory of a plan (spec: "Execution", "Memory").

Every figure a user sees comes from here. Two entry points share one core:

* `simulate(profile, plan, budget)` validates and returns a full `Schedule`;
* `Scorer(profile).score(...)` takes raw action lists from trusted callers
  (the heuristics' inner loops) and returns just `(makespan, peak)`.

Times come from one pass over the three queues in their spec order (the
compute stream's order is fixed by the plan, each copy queue is FIFO in a
fixed order), so no event heap is needed. Memory is one vectorised sweep
over allocation and free events sorted by (time, frees first).

Version 3 (a plan's options on partial layers, a negative backward
scratch) runs through the same passes: `options` is one more list beside
the actions (None: no layer partial, exactly version 2).

NOTE (size): the timing pass and the memory sweep read the same structure
of the plan (its recompute runs, where each is regenerated, which outputs
have a backward reader, which layers are partial: `Runs`); kept in one
module so that structure is computed once and never travels between two.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np

from planopt.budget import number_bytes, parse_budget
from planopt.bundled import resolve_profile
from planopt.errors import BudgetError, InvalidPlanError, show
from planopt.plan import KEEP, RECOMPUTE, SWAP, Action, Plan
from planopt.profile import Profile
from planopt.schedule import OP_KINDS, OpKind, Schedule

_NAN = float("nan")
_KIND_CODE = {kind: code for code, kind in enumerate(OP_KINDS)}

# NOTE (stopping a simulation): at 10^6 layers one simulation takes seconds,
# so a caller with a deadline (the greedy) passes `stop` and the timing pass
# asks it after every STOP_EVERY layers (a few ms of work; never at the
# start, so a chain of at most STOP_EVERY layers always runs to its end),
# and once more before the memory sweep; when it says yes the simulation
# raises `SimulationStopped` and returns nothing. Without `stop` nothing
# changes: the chunks run the same operations in the same order.
STOP_EVERY = 4096


class SimulationStopped(Exception):
    """The caller's `stop` said to give up mid-simulation (its deadline passed)."""


@dataclass(frozen=True, slots=True)
class Timing:
    """Start/end of every operation, indexed by layer (NaN where it does not exist)."""

    f_start: list[float]
    f_end: list[float]
    out_start: list[float]
    out_end: list[float]
    back_start: list[float]
    back_end: list[float]
    r_start: list[float]
    r_end: list[float]
    b_start: list[float]
    b_end: list[float]
    makespan: float
    g_start: list[float] | None = None  # a partial layer's regeneration R_i (v3)
    g_end: list[float] | None = None


@dataclass(frozen=True, slots=True)
class Runs:
    """The plan's recompute runs, where each is regenerated, and who reads each output.

    `block_at[u]` is the run `(first, top)` regenerated at backward step `u`
    (at most one per step). `out_read[i]` says the output of layer `i` has a
    backward reader under this plan: `B_i` (`saves_output`), `B_{i+1}`
    (`saves_input` of the next layer) or the block of the run starting at
    `i+1` (spec v2: "Layer i's products"). `part[i]` is the option `(h_k,
    r_k, w_k)` of a partial layer (spec v3), None elsewhere; `reads_in[i]`
    says step `i` reads its input (`saves_input`, or partial); length n + 1.
    """

    block_at: dict[int, tuple[int, int]]
    out_read: list[bool]
    part: list[tuple[int, float, int] | None] | None = None
    reads_in: list[bool] | None = None


class Scorer:
    """Scores plans on one profile; holds the profile's numbers as flat lists.

    Callers pass `actions` (a sequence of `Action`), `prefetch_at` and
    `swap_wait` lists exactly as in `Plan`, already valid: this is the inner
    loop of the heuristics and does not re-validate. `free_copies` makes the
    copies of the given layers take no time (the greedy's "swap cost" probe).
    """

    def __init__(self, profile: Profile | str) -> None:
        profile = resolve_profile(profile)
        self.profile = profile
        layers = profile.layers
        n = self.n = len(layers)
        self.fwd = [layer.fwd for layer in layers]
        self.bwd = [layer.bwd for layer in layers]
        self.out = [layer.out_bytes for layer in layers]
        self.internals = [layer.saved_bytes for layer in layers]
        self.saves_input = [layer.saves_input for layer in layers] + [False]
        self.saves_output = [layer.saves_output for layer in layers]
        # The output has a reader whatever the plan (a recompute block above may add one).
        self.out_read_always = [self.saves_output[i] or self.saves_input[i + 1] for i in range(n)]
        # B_i reads its own products back when it has internals or reads its output.
        self._reads_own = [
            s > 0 or o for s, o in zip(self.internals, self.saves_output, strict=True)
        ]
        dev = profile.device
        self.device = dev
        # Copy durations when the output is copied too, and when only internals are.
        with_out = [s + o for s, o in zip(self.internals, self.out, strict=True)]
        self._out_dur = (
            [dev.d2h_seconds(s) for s in self.internals],
            [dev.d2h_seconds(c) for c in with_out],
        )
        self._back_dur = (
            [dev.h2d_seconds(s) for s in self.internals],
            [dev.h2d_seconds(c) for c in with_out],
        )
        self.static = profile.static_bytes
        self._out = np.array(self.out, dtype=np.int64)
        self._int = np.array(self.internals, dtype=np.int64)
        self._fw = np.array([layer.fwd_work_bytes for layer in layers], dtype=np.int64)
        self._bw = np.array([layer.bwd_work_bytes for layer in layers], dtype=np.int64)
        self._grad = np.array([layer.input_grad_bytes for layer in layers], dtype=np.int64)
        self._pgrad = np.array([layer.param_grad_bytes for layer in layers], dtype=np.int64)
        self._saves_out = np.array(self.saves_output, dtype=bool)
        self._saves_in_next = np.array(self.saves_input[1:], dtype=bool)
        # Each layer's menu by name: (h_k, r_k, w_k) (spec v3: "The menu").
        self._menus = [
            {o.name: (o.saved_bytes, o.recompute, o.regen_work_bytes) for o in layer.options}
            for layer in layers
        ]

    def partial(self, options: Sequence[str | None] | None):
        """Per layer, the chosen option's `(h_k, r_k, w_k)` (None: whole); None if none chosen."""
        if options is None or all(o is None for o in options):
            return None
        return [None if o is None else self._menus[i][o] for i, o in enumerate(options)]

    # -- the plan's structure ------------------------------------------------------

    def runs(self, actions: Sequence[Action], options: Sequence[str | None] | None = None) -> Runs:
        """Recompute runs with their block steps, and which outputs have a reader."""
        n = self.n
        block_at: dict[int, tuple[int, int]] = {}
        part = self.partial(options)
        reads_in = self.saves_input
        out_read = list(self.out_read_always)
        if part is not None:
            # A partial layer reads its input (its regeneration does), as if it saved it.
            reads_in = [flag or (i < n and part[i] is not None) for i, flag in enumerate(reads_in)]
            for i in range(1, n):
                if part[i] is not None:
                    out_read[i - 1] = True
        i = 0
        while i < n:
            if actions[i] is RECOMPUTE:
                first = i
                while i + 1 < n and actions[i + 1] is RECOMPUTE:
                    i += 1
                step = i + 1 if i + 1 < n and reads_in[i + 1] else i
                block_at[step] = (first, i)
                if first > 0:
                    out_read[first - 1] = True  # the block's base
            i += 1
        return Runs(block_at, out_read, part, reads_in)

    def copy_bytes(self, i: int, runs: Runs) -> int:
        """`c_i`: what a swap of layer `i` copies (its kept internals, and its output if read)."""
        kept = self.internals[i]
        if runs.part is not None and runs.part[i] is not None:
            kept = runs.part[i][0]
        return kept + (self.out[i] if runs.out_read[i] else 0)

    def copy_durations(self, actions: Sequence[Action], runs: Runs | None = None):
        """Per-layer copy-out and copy-back seconds of this plan's swaps (lists)."""
        runs = runs or self.runs(actions)
        pick = [1 if r else 0 for r in runs.out_read]
        out_dur = [self._out_dur[p][i] for i, p in enumerate(pick)]
        back_dur = [self._back_dur[p][i] for i, p in enumerate(pick)]
        if runs.part is not None:
            dev = self.device
            for i, chosen in enumerate(runs.part):
                if chosen is not None:
                    nbytes = self.copy_bytes(i, runs)
                    out_dur[i] = dev.d2h_seconds(nbytes)
                    back_dur[i] = dev.h2d_seconds(nbytes)
        return out_dur, back_dur

    def reads_back(self, t: int, actions: Sequence[Action], runs: Runs | None = None) -> list[int]:
        """Swap layers whose copy back step `t` must wait for (layer `t`, layer `t-1`).

        Step `t`'s first operation waits: `R_t` for a partial layer (whose own
        copy counts when it holds kept internals or the output `B_t` reads),
        else `B_t`.
        """
        chosen = None if runs is None or runs.part is None else runs.part[t]
        reads_own = self._reads_own[t] if chosen is None else chosen[0] > 0 or self.saves_output[t]
        reads_in = self.saves_input if runs is None or runs.reads_in is None else runs.reads_in
        out = []
        if actions[t] is SWAP and reads_own:
            out.append(t)
        if t > 0 and reads_in[t] and actions[t - 1] is SWAP:
            out.append(t - 1)
        return out

    # -- times --------------------------------------------------------------

    def timing(
        self,
        actions: Sequence[Action],
        prefetch_at: Sequence[int | None],
        swap_wait: Sequence[int | None],
        free_copies: Collection[int] = (),
        runs: Runs | None = None,
        *,
        stop: Callable[[], bool] | None = None,
    ) -> Timing:
        n = self.n
        fwd, bwd = self.fwd, self.bwd
        runs = runs or self.runs(actions)
        out_dur, back_dur = self.copy_durations(actions, runs)
        for i in free_copies:
            out_dur[i] = back_dur[i] = 0.0

        waiters: dict[int, list[int]] = {}
        prefetches: dict[int, list[int]] = {}
        for i in range(n):
            if actions[i] is SWAP:
                prefetches.setdefault(prefetch_at[i], []).append(i)
                w = swap_wait[i]
                if w is not None:
                    waiters.setdefault(w, []).append(i)

        f_start = [_NAN] * n
        f_end = [_NAN] * n
        out_start = [_NAN] * n
        out_end = [_NAN] * n
        # Forward: F_i waits for F_{i-1} and for copies out named by swap_wait.
        clock = 0.0
        d2h_free = 0.0
        for lo in range(0, n, STOP_EVERY):
            if lo and stop is not None and stop():
                raise SimulationStopped
            for i in range(lo, min(n, lo + STOP_EVERY)):
                if i in waiters:
                    for w in waiters[i]:
                        if out_end[w] > clock:
                            clock = out_end[w]
                f_start[i] = clock
                clock += fwd[i]
                f_end[i] = clock
                if actions[i] is SWAP:
                    start = clock if clock > d2h_free else d2h_free
                    out_start[i] = start
                    d2h_free = start + out_dur[i]
                    out_end[i] = d2h_free

        back_start = [_NAN] * n
        back_end = [_NAN] * n
        r_start = [_NAN] * n
        r_end = [_NAN] * n
        b_start = [_NAN] * n
        b_end = [_NAN] * n
        part = runs.part
        g_start = None if part is None else [_NAN] * n
        g_end = None if part is None else [_NAN] * n
        h2d_free = 0.0
        block_at = runs.block_at
        reads_own, saves_input = self._reads_own, self.saves_input
        # Backward steps L-1 .. 0. `clock` is when the previous compute op ends,
        # which is also when step t is issued.
        for hi in range(n, 0, -STOP_EVERY):
            if hi < n and stop is not None and stop():
                raise SimulationStopped
            for t in range(hi - 1, max(0, hi - STOP_EVERY) - 1, -1):
                if t in prefetches:
                    # Enqueued at the issue instant, higher layer index first (each
                    # list was filled in increasing layer order).
                    for i in reversed(prefetches[t]):
                        start = clock if clock > h2d_free else h2d_free
                        if out_end[i] > start:
                            start = out_end[i]
                        back_start[i] = start
                        h2d_free = start + back_dur[i]
                        back_end[i] = h2d_free
                if t in block_at:
                    first, top = block_at[t]
                    k = first - 1
                    if k >= 0 and actions[k] is SWAP and back_end[k] > clock:
                        clock = back_end[k]
                    for j in range(first, top + 1):
                        r_start[j] = clock
                        clock += fwd[j]
                        r_end[j] = clock
                if part is not None and part[t] is not None:
                    # R_t waits for what step t reads back, then B_t follows at once.
                    for w in self.reads_back(t, actions, runs):
                        if back_end[w] > clock:
                            clock = back_end[w]
                    g_start[t] = clock
                    clock += part[t][1]
                    g_end[t] = clock
                    b_start[t] = clock
                    clock += bwd[t]
                    b_end[t] = clock
                    continue
                # `reads_back(t, actions)`, inlined: it runs for every layer.
                if actions[t] is SWAP and reads_own[t] and back_end[t] > clock:
                    clock = back_end[t]
                if t and saves_input[t] and actions[t - 1] is SWAP and back_end[t - 1] > clock:
                    clock = back_end[t - 1]
                b_start[t] = clock
                clock += bwd[t]
                b_end[t] = clock

        makespan = max(clock, d2h_free, h2d_free)
        return Timing(
            f_start,
            f_end,
            out_start,
            out_end,
            back_start,
            back_end,
            r_start,
            r_end,
            b_start,
            b_end,
            makespan,
            g_start,
            g_end,
        )

    def makespan(
        self, actions, prefetch_at, swap_wait, free_copies: Collection[int] = (), options=None
    ) -> float:
        runs = self.runs(actions, options)
        return self.timing(actions, prefetch_at, swap_wait, free_copies, runs).makespan

    # -- memory -------------------------------------------------------------

    def _tensors(self, actions: Sequence[Action], tm: Timing, runs: Runs):
        """(alloc time, free time, bytes) of every tensor of the spec's memory table."""
        n = self.n
        code = np.fromiter(
            (0 if a is KEEP else 1 if a is SWAP else 2 for a in actions), dtype=np.int8, count=n
        )
        keep, swap, rec = code == 0, code == 1, code == 2
        f_start = np.array(tm.f_start)
        f_end = np.array(tm.f_end)
        b_start = np.array(tm.b_start)
        b_end = np.array(tm.b_end)
        r_start = np.array(tm.r_start)
        r_end = np.array(tm.r_end)
        out_end = np.array(tm.out_end)
        back_start = np.array(tm.back_start)
        zero = np.zeros(n, dtype=np.int64)
        nan = np.full(n, np.nan)
        # "end of F_{i+1} (end of F_i for the last layer)": an output's forward use
        fwd_use = np.append(f_end[1:], f_end[-1])
        b_end_next = np.append(b_end[1:], np.nan)
        r_end_next = np.append(r_end[1:], np.nan)
        # The output's last backward reader: B_i, else B_{i+1}, else the block above
        # (which reads its base until the end of its first forward, F_{i+1}).
        out_read = np.array(runs.out_read, dtype=bool)
        in_next = self._saves_in_next
        kept_int = self._int
        if runs.part is not None:
            # v3: a partial layer reads its input; it keeps h_k of its internals.
            in_next = np.array(runs.reads_in[1 : n + 1], dtype=bool)
            kept_int = np.array(
                [s if c is None else c[0] for s, c in zip(self.internals, runs.part, strict=True)],
                dtype=np.int64,
            )
        last_read = np.where(self._saves_out, b_end, np.where(in_next, b_end_next, r_end_next))
        has_int = kept_int > 0
        int_free = np.where(keep, b_end, np.where(swap, np.fmax(out_end, f_end), f_end))
        int_free = np.where(has_int, int_free, f_end)
        out_free = np.where(keep, last_read, np.where(swap, np.fmax(out_end, fwd_use), fwd_use))
        out_free = np.where(out_read & ~rec, out_free, fwd_use)
        # Regenerated in a block: internals to B_j; the output to its last reader
        # (B_j, else B_{j+1}), else to the end of its forward use in the block.
        regen_use = np.append(r_end[1:], np.nan)
        top = rec & ~np.append(rec[1:], False)
        regen_use = np.where(top, r_end, regen_use)
        regen_out_free = np.where(self._saves_out, b_end, np.where(in_next, b_end_next, regen_use))
        back_out = swap & out_read
        g_free = np.append(nan[:1], b_end[:-1])  # g_i is freed at the end of B_{i-1}
        allocs = [
            f_start,  # internals
            f_start,  # output
            f_start,  # forward scratch
            np.where(swap, back_start, 0.0),  # copied back: internals
            np.where(back_out, back_start, 0.0),  # copied back: output
            np.where(rec, r_start, 0.0),  # regenerated internals
            np.where(rec, r_start, 0.0),  # regenerated output
            np.where(rec, r_start, 0.0),  # scratch of the block's forward
            b_start,  # input gradient
            b_start,  # parameter gradients
            b_start,  # backward scratch
        ]
        frees = [
            int_free,
            out_free,
            f_end,
            b_end,
            np.where(back_out, last_read, 0.0),
            b_end,
            np.where(rec, regen_out_free, 0.0),
            np.where(rec, r_end, 0.0),
            g_free,
            np.full(n, np.inf),
            b_end,
        ]
        sizes = [
            kept_int,
            self._out,
            self._fw,
            np.where(swap, kept_int, zero),
            np.where(back_out, self._out, zero),
            np.where(rec, self._int, zero),
            np.where(rec, self._out, zero),
            np.where(rec, self._fw, zero),
            self._grad,
            self._pgrad,
            self._bw,
        ]
        if runs.part is not None:
            # v3: the dropped internals live through F_i; R_i regenerates them to
            # the end of B_i, with its scratch while it runs.
            dropped = self._int - kept_int
            regen_work = np.array([0 if c is None else c[2] for c in runs.part], dtype=np.int64)
            g_start, g_end = np.array(tm.g_start), np.array(tm.g_end)
            allocs += [f_start, np.nan_to_num(g_start), np.nan_to_num(g_start)]
            frees += [f_end, b_end, np.nan_to_num(g_end)]
            sizes += [dropped, dropped, regen_work]
        return np.concatenate(allocs), np.concatenate(frees), np.concatenate(sizes)

    def memory(self, actions: Sequence[Action], tm: Timing, runs: Runs | None = None):
        """(peak bytes, time of peak, curve times, curve bytes)."""
        alloc, free, size = self._tensors(actions, tm, runs or self.runs(actions))
        # NOTE: the spec applies every decrease before any increase at one
        # instant (v2: frees first; v3: a negative scratch takes effect with
        # the frees and comes back with the allocations), so a tensor
        # allocated and freed at the same instant (a zero-duration operation's
        # scratch, say) never occupies memory: it is dropped here, which also
        # keeps the memory curve free of transient dips. Parameter gradients
        # are freed at the end of the step (an infinite time here); their
        # free is left out of the curve, which ends at their level.
        live = (size != 0) & (free > alloc)
        alloc, free, size = alloc[live], free[live], size[live]
        m = size.shape[0]
        if m == 0:
            empty = np.zeros(0)
            return self.static, 0.0, empty, empty.astype(np.int64)
        times = np.concatenate((alloc, free))
        delta = np.concatenate((size, -size))
        prio = (delta > 0).astype(np.int8)
        order = np.lexsort((prio, times))
        level = self.static + np.cumsum(delta[order])
        top = int(np.argmax(level))
        peak = max(int(level[top]), self.static)
        curve_times = times[order]
        finite = np.isfinite(curve_times)
        return peak, float(curve_times[top]), curve_times[finite], level[finite]

    def peak(self, actions, prefetch_at, swap_wait, options=None) -> int:
        return self.score(actions, prefetch_at, swap_wait, options=options)[1]

    def score(
        self,
        actions,
        prefetch_at,
        swap_wait,
        free_copies: Collection[int] = (),
        *,
        stop: Callable[[], bool] | None = None,
        options: Sequence[str | None] | None = None,
    ) -> tuple[float, int]:
        """(makespan, peak bytes) of a valid plan given as lists (`stop`: see the NOTE).

        `options` names each layer's option (spec v3; None: no layer partial).
        """
        runs = self.runs(actions, options)
        tm = self.timing(actions, prefetch_at, swap_wait, free_copies, runs, stop=stop)
        if stop is not None and self.n > STOP_EVERY and stop():
            raise SimulationStopped
        return tm.makespan, self.memory(actions, tm, runs)[0]

    def score_plan(self, plan: Plan) -> tuple[float, int]:
        return self.score(plan.actions, plan.prefetch_at, plan.swap_wait, options=plan.options)

    # -- full schedule --------------------------------------------------------

    def schedule(self, plan: Plan, budget: float | None = None) -> Schedule:
        runs = self.runs(plan.actions, plan.options)
        tm = self.timing(plan.actions, plan.prefetch_at, plan.swap_wait, runs=runs)
        peak, peak_time, mem_t, mem_b = self.memory(plan.actions, tm, runs)
        kinds, layers, starts, ends = [], [], [], []
        for kind, st, en in (
            (OpKind.FORWARD, tm.f_start, tm.f_end),
            (OpKind.COPY_OUT, tm.out_start, tm.out_end),
            (OpKind.COPY_BACK, tm.back_start, tm.back_end),
            (OpKind.RECOMPUTE, tm.r_start, tm.r_end),
            (OpKind.BACKWARD, tm.b_start, tm.b_end),
            (OpKind.REGENERATE, tm.g_start or [], tm.g_end or []),
        ):
            s = np.array(st)
            present = ~np.isnan(s)
            idx = np.flatnonzero(present)
            kinds.append(np.full(idx.shape[0], _KIND_CODE[kind], dtype=np.int8))
            layers.append(idx)
            starts.append(s[present])
            ends.append(np.array(en)[present])
        recompute = math.fsum(self.fwd[j] for j in range(self.n) if plan.actions[j] is RECOMPUTE)
        if runs.part is not None:
            recompute += math.fsum(c[1] for c in runs.part if c is not None)
        return Schedule(
            makespan=tm.makespan,
            peak_bytes=peak,
            peak_time=peak_time,
            t_ideal=self.profile.t_ideal,
            static_bytes=self.static,
            budget=budget,
            compute_seconds=self.profile.t_ideal + recompute,
            op_kind=np.concatenate(kinds),
            op_layer=np.concatenate(layers),
            op_start=np.concatenate(starts),
            op_end=np.concatenate(ends),
            memory_times=mem_t,
            memory_bytes=mem_b,
        )


def check_budget(budget: float | None) -> int | None:
    """A budget in whole bytes (rounded down) from a number >= 0, or None for no limit."""
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, int | float):
        raise BudgetError(f"budget must be a finite number of bytes, got {show(budget)}")
    return number_bytes(budget)


def simulate(
    profile: Profile | str, plan: Plan, budget: float | int | str | None = None
) -> Schedule:
    """Execute `plan` on `profile` under the spec's semantics.

    `profile` may also be a bundled name or a profile file; `budget` is the
    grammar of `parse_budget` (bytes, `"12GiB"`, `"50%"`). Raises
    `InvalidPlanError`/`ProfileMismatchError` when the plan does not belong
    to the profile. With `budget`, `Schedule.feasible` says whether the peak
    fits; nothing ever waits for memory (the spec's memory is a check).
    """
    profile = resolve_profile(profile)
    if not isinstance(plan, Plan):
        raise InvalidPlanError(f"plan must be a planopt.Plan, got {show(plan)}")
    bytes_budget = None if budget is None else parse_budget(budget, profile)
    plan.check(profile)
    return Scorer(profile).schedule(plan, bytes_budget)
