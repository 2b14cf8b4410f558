"""The one cost model: makespan and peak memory of a plan (spec: "Execution", "Memory").

Every figure a user sees comes from here. Two entry points share one core:

* `simulate(profile, plan, budget)` validates and returns a full `Schedule`;
* `Scorer(profile).score(...)` takes raw action lists from trusted callers
  (the heuristics' inner loops) and returns just `(makespan, peak)`.

Times come from one pass over the three queues in their spec order (the
compute stream's order is fixed by the plan, each copy queue is FIFO in a
fixed order), so no event heap is needed. Memory is one vectorised sweep
over allocation and free events sorted by (time, frees first).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from planopt.errors import BudgetError
from planopt.plan import KEEP, RECOMPUTE, SWAP, Action, Plan
from planopt.profile import Profile
from planopt.schedule import OP_KINDS, OpKind, Schedule

_NAN = float("nan")
_KIND_CODE = {kind: code for code, kind in enumerate(OP_KINDS)}


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


class Scorer:
    """Scores plans on one profile; holds the profile's numbers as flat lists.

    Callers pass `actions` (a sequence of `Action`), `prefetch_at` and
    `swap_wait` lists exactly as in `Plan`, already valid: this is the inner
    loop of the heuristics and does not re-validate. `free_copies` makes the
    copies of the given layers take no time (the greedy's "swap cost" probe).
    """

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        layers = profile.layers
        self.n = len(layers)
        self.fwd = [layer.fwd for layer in layers]
        self.bwd = [layer.bwd for layer in layers]
        self.size = [layer.saved_bytes for layer in layers]
        dev = profile.device
        self.out_dur = [dev.d2h_seconds(s) for s in self.size]
        self.back_dur = [dev.h2d_seconds(s) for s in self.size]
        self.static = profile.static_bytes
        self._size = np.array(self.size, dtype=np.int64)
        self._fw = np.array([layer.fwd_work_bytes for layer in layers], dtype=np.int64)
        self._bw = np.array([layer.bwd_work_bytes for layer in layers], dtype=np.int64)

    # -- times --------------------------------------------------------------

    def timing(
        self,
        actions: Sequence[Action],
        prefetch_at: Sequence[int | None],
        swap_wait: Sequence[int | None],
        free_copies: Collection[int] = (),
    ) -> Timing:
        n = self.n
        fwd, bwd = self.fwd, self.bwd
        out_dur, back_dur = self.out_dur, self.back_dur
        if free_copies:
            out_dur = list(out_dur)
            back_dur = list(back_dur)
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
        for i in range(n):
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
        h2d_free = 0.0
        # Backward steps L-1 .. 0. `clock` is when the previous compute op ends,
        # which is also when step t is issued.
        for t in range(n - 1, -1, -1):
            if t in prefetches:
                # Enqueued at the issue instant, higher layer index first.
                for i in sorted(prefetches[t], reverse=True):
                    start = clock if clock > h2d_free else h2d_free
                    if out_end[i] > start:
                        start = out_end[i]
                    back_start[i] = start
                    h2d_free = start + back_dur[i]
                    back_end[i] = h2d_free
            if actions[t] is RECOMPUTE and (t == n - 1 or actions[t + 1] is not RECOMPUTE):
                k = t - 1
                while k >= 0 and actions[k] is RECOMPUTE:
                    k -= 1
                if k >= 0 and actions[k] is SWAP and back_end[k] > clock:
                    clock = back_end[k]
                for j in range(k + 1, t + 1):
                    r_start[j] = clock
                    clock += fwd[j]
                    r_end[j] = clock
            if actions[t] is SWAP and back_end[t] > clock:
                clock = back_end[t]
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
        )

    def makespan(self, actions, prefetch_at, swap_wait, free_copies: Collection[int] = ()) -> float:
        return self.timing(actions, prefetch_at, swap_wait, free_copies).makespan

    # -- memory -------------------------------------------------------------

    def _tensors(self, actions: Sequence[Action], tm: Timing):
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
        # "end of F_{i+1} (end of F_i for the last layer)"
        f_end_next = np.append(f_end[1:], f_end[-1])
        saved_free = np.where(keep, b_end, np.where(rec, f_end_next, np.fmax(out_end, f_end_next)))
        zero = np.zeros(n, dtype=np.int64)
        allocs = [
            f_start,
            f_start,
            np.where(swap, back_start, 0.0),
            np.where(rec, r_start, 0.0),
            np.where(rec, r_start, 0.0),
            b_start,
        ]
        frees = [saved_free, f_end, b_end, b_end, np.where(rec, r_end, 0.0), b_end]
        sizes = [
            self._size,
            self._fw,
            np.where(swap, self._size, zero),
            np.where(rec, self._size, zero),
            np.where(rec, self._fw, zero),
            self._bw,
        ]
        return np.concatenate(allocs), np.concatenate(frees), np.concatenate(sizes)

    def memory(self, actions: Sequence[Action], tm: Timing):
        """(peak bytes, time of peak, curve times, curve bytes)."""
        alloc, free, size = self._tensors(actions, tm)
        # NOTE: the spec frees before it allocates at one instant, so a tensor
        # allocated and freed at the same instant (a zero-duration operation's
        # scratch, say) never occupies memory: it is dropped here, which also
        # keeps the memory curve free of transient dips.
        live = (size > 0) & (free > alloc)
        alloc, free, size = alloc[live], free[live], size[live]
        m = size.shape[0]
        if m == 0:
            empty = np.zeros(0)
            return self.static, 0.0, empty, empty.astype(np.int64)
        times = np.concatenate((alloc, free))
        delta = np.concatenate((size, -size))
        prio = np.concatenate((np.ones(m, dtype=np.int8), np.zeros(m, dtype=np.int8)))
        order = np.lexsort((prio, times))
        level = self.static + np.cumsum(delta[order])
        top = int(np.argmax(level))
        peak = max(int(level[top]), self.static)
        return peak, float(times[order][top]), times[order], level

    def peak(self, actions, prefetch_at, swap_wait) -> int:
        tm = self.timing(actions, prefetch_at, swap_wait)
        return self.memory(actions, tm)[0]

    def score(
        self, actions, prefetch_at, swap_wait, free_copies: Collection[int] = ()
    ) -> tuple[float, int]:
        """(makespan, peak bytes) of a valid plan given as lists."""
        tm = self.timing(actions, prefetch_at, swap_wait, free_copies)
        return tm.makespan, self.memory(actions, tm)[0]

    def score_plan(self, plan: Plan) -> tuple[float, int]:
        return self.score(plan.actions, plan.prefetch_at, plan.swap_wait)

    # -- full schedule --------------------------------------------------------

    def schedule(self, plan: Plan, budget: float | None = None) -> Schedule:
        tm = self.timing(plan.actions, plan.prefetch_at, plan.swap_wait)
        peak, peak_time, mem_t, mem_b = self.memory(plan.actions, tm)
        kinds, layers, starts, ends = [], [], [], []
        for kind, st, en in (
            (OpKind.FORWARD, tm.f_start, tm.f_end),
            (OpKind.COPY_OUT, tm.out_start, tm.out_end),
            (OpKind.COPY_BACK, tm.back_start, tm.back_end),
            (OpKind.RECOMPUTE, tm.r_start, tm.r_end),
            (OpKind.BACKWARD, tm.b_start, tm.b_end),
        ):
            s = np.array(st)
            present = ~np.isnan(s)
            idx = np.flatnonzero(present)
            kinds.append(np.full(idx.shape[0], _KIND_CODE[kind], dtype=np.int8))
            layers.append(idx)
            starts.append(s[present])
            ends.append(np.array(en)[present])
        recompute = math.fsum(self.fwd[j] for j in range(self.n) if plan.actions[j] is RECOMPUTE)
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


def check_budget(budget: float | None) -> float | None:
    """A budget must be a finite number of bytes >= 0 (or None for no limit)."""
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, int | float) or not math.isfinite(budget):
        raise BudgetError(f"budget must be a finite number of bytes, got {budget!r}")
    if budget < 0:
        raise BudgetError(f"budget must be >= 0 bytes, got {budget!r}")
    return budget


def simulate(profile: Profile, plan: Plan, budget: float | None = None) -> Schedule:
    """Execute `plan` on `profile` under the spec's semantics.

    Raises `InvalidPlanError`/`ProfileMismatchError` when the plan does not
    belong to the profile. With `budget`, `Schedule.feasible` says whether the
    peak fits; nothing ever waits for memory (the spec's memory is a check).
    """
    plan.check(profile)
    return Scorer(profile).schedule(plan, check_budget(budget))
