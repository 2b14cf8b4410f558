"""An independent, slow, event-by-event reading of the cost model (tests only).

Version 1 of the cost model: it reads a profile's one saved size per layer
(`Layer.product_bytes`, which is the output under the spec's version-1
reading), so it takes version-1 profiles only; `tests/reference_v2.py` is
the version-2 reference. Written from the text of `shared/spec/cost-model.md`
alone, without looking at `planopt/simulate.py`, so that the two can be
compared: where they disagree, one of the two readings of the spec is wrong.

The time model is a discrete-event simulation: a heap of operation-end
events `(time, seq)`, three resources (compute stream, D2H, H2D) that each
run one operation at a time, and after every event each idle resource starts
its next operation if the spec's conditions for it hold. Memory is a second
pass over explicit allocate/free events at instants.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass

from planopt.plan import RECOMPUTE, SWAP, Plan
from planopt.profile import Profile

COMPUTE, D2H, H2D = "compute", "d2h", "h2d"
FORWARD, RECOMP, BACKWARD = "forward", "recompute", "backward"
COPY_OUT, COPY_BACK = "copy_out", "copy_back"


@dataclass(frozen=True)
class RefOp:
    """One executed operation."""

    resource: str
    kind: str
    layer: int
    start: float
    end: float


@dataclass(frozen=True)
class RefTensor:
    """One device allocation: `nbytes` present from `alloc` until `free`."""

    what: str
    layer: int
    nbytes: int
    alloc: float
    free: float


@dataclass(frozen=True)
class RefResult:
    makespan: float
    peak_bytes: int
    operations: tuple[RefOp, ...]
    tensors: tuple[RefTensor, ...]

    def op(self, kind: str, layer: int) -> RefOp:
        """The operation of `kind` on `layer` (each occurs at most once)."""
        (found,) = [o for o in self.operations if o.kind == kind and o.layer == layer]
        return found


@dataclass(frozen=True)
class _ComputeOp:
    kind: str  # FORWARD, RECOMP or BACKWARD
    layer: int
    step: int | None  # backward step this op belongs to (None in forward)
    first_of_step: bool
    wait_copy_back: int | None  # swap layer whose copy back must have ended first


def _runs(actions) -> list[tuple[int, int]]:
    """Maximal recompute runs `(k+1, t)` found by a plain scan (no planopt helper)."""
    runs, i, n = [], 0, len(actions)
    while i < n:
        if actions[i] is RECOMPUTE:
            j = i
            while j + 1 < n and actions[j + 1] is RECOMPUTE:
                j += 1
            runs.append((i, j))
            i = j + 1
        else:
            i += 1
    return runs


def _compute_stream(actions) -> list[_ComputeOp]:
    """The compute stream's fixed order: forwards, then backward steps L-1 .. 0."""
    n = len(actions)
    ops = [_ComputeOp(FORWARD, i, None, False, None) for i in range(n)]
    run_by_top = {top: first for first, top in _runs(actions)}
    for t in range(n - 1, -1, -1):
        first = True
        if t in run_by_top:
            lo = run_by_top[t]
            base = lo - 1
            for j in range(lo, t + 1):
                wait = base if (j == lo and base >= 0 and actions[base] is SWAP) else None
                ops.append(_ComputeOp(RECOMP, j, t, first, wait))
                first = False
        wait = t if actions[t] is SWAP else None
        ops.append(_ComputeOp(BACKWARD, t, t, first, wait))
    return ops


def reference_run(profile: Profile, plan: Plan, *, free_copies: Collection[int] = ()) -> RefResult:
    """Execute `plan` on `profile` event by event; `free_copies` makes those layers'
    copies take no time (both directions)."""
    layers = profile.layers
    dev = profile.device
    n = len(layers)
    actions = plan.actions
    if len(actions) != n:
        raise ValueError(f"plan has {len(actions)} layers, profile {n}")

    def d2h_time(i: int) -> float:
        if i in free_copies:
            return 0.0
        return dev.transfer_latency + layers[i].product_bytes / dev.d2h_bandwidth

    def h2d_time(i: int) -> float:
        if i in free_copies:
            return 0.0
        return dev.transfer_latency + layers[i].product_bytes / dev.h2d_bandwidth

    waits_at: dict[int, list[int]] = {}
    prefetch_at: dict[int, list[int]] = {}
    for i, a in enumerate(actions):
        if a is SWAP:
            if plan.swap_wait[i] is not None:
                waits_at.setdefault(plan.swap_wait[i], []).append(i)
            prefetch_at.setdefault(plan.prefetch_at[i], []).append(i)

    stream = _compute_stream(actions)
    next_compute = 0
    busy = {COMPUTE: False, D2H: False, H2D: False}
    d2h_queue: deque[int] = deque()
    h2d_queue: deque[int] = deque()
    copy_out_end: dict[int, float] = {}
    copy_back_end: dict[int, float] = {}
    events: list[tuple[float, int, str, int, int]] = []  # (time, seq, resource, stream idx, layer)
    seq = 0
    executed: list[RefOp] = []
    starts: dict[tuple, float] = {}

    def push_end(now: float, duration: float, resource: str, idx: int, layer: int) -> None:
        nonlocal seq
        heapq.heappush(events, (now + duration, seq, resource, idx, layer))
        seq += 1

    def compute_ready(op: _ComputeOp) -> bool:
        if op.kind == FORWARD:
            return all(w in copy_out_end for w in waits_at.get(op.layer, ()))
        if op.wait_copy_back is not None:
            return op.wait_copy_back in copy_back_end
        return True

    def try_start(now: float) -> None:
        nonlocal next_compute
        if not busy[COMPUTE] and next_compute < len(stream):
            op = stream[next_compute]
            if compute_ready(op):
                busy[COMPUTE] = True
                layer = layers[op.layer]
                duration = layer.bwd if op.kind == BACKWARD else layer.fwd
                starts[("c", next_compute)] = now
                push_end(now, duration, COMPUTE, next_compute, op.layer)
                next_compute += 1
        if not busy[D2H] and d2h_queue:
            i = d2h_queue.popleft()
            busy[D2H] = True
            starts[(COPY_OUT, i)] = now
            push_end(now, d2h_time(i), D2H, -1, i)
        if not busy[H2D] and h2d_queue and h2d_queue[0] in copy_out_end:
            i = h2d_queue.popleft()
            busy[H2D] = True
            starts[(COPY_BACK, i)] = now
            push_end(now, h2d_time(i), H2D, -1, i)

    def issue_step(j: int) -> None:
        # Copies back of every swap layer with prefetch_at = j, higher index first.
        for i in sorted(prefetch_at.get(j, ()), reverse=True):
            h2d_queue.append(i)

    try_start(0.0)
    while events:
        now, _, resource, idx, layer = heapq.heappop(events)
        busy[resource] = False
        if resource == COMPUTE:
            op = stream[idx]
            executed.append(RefOp(COMPUTE, op.kind, layer, starts[("c", idx)], now))
            if op.kind == FORWARD and actions[layer] is SWAP:
                d2h_queue.append(layer)
            if idx + 1 < len(stream) and stream[idx + 1].first_of_step:
                issue_step(stream[idx + 1].step)
        elif resource == D2H:
            copy_out_end[layer] = now
            executed.append(RefOp(D2H, COPY_OUT, layer, starts[(COPY_OUT, layer)], now))
        else:
            copy_back_end[layer] = now
            executed.append(RefOp(H2D, COPY_BACK, layer, starts[(COPY_BACK, layer)], now))
        try_start(now)

    if next_compute < len(stream) or d2h_queue or h2d_queue:
        raise RuntimeError("reference simulation deadlocked: the plan cannot execute")

    result_ops = tuple(executed)
    tensors = tuple(_tensors(profile, plan, result_ops))
    makespan = max(o.end for o in result_ops)
    return RefResult(makespan, _peak(profile.static_bytes, tensors), result_ops, tensors)


def _tensors(profile: Profile, plan: Plan, ops: tuple[RefOp, ...]) -> list[RefTensor]:
    """Every allocation of the spec's Memory table, with its instants."""
    n = len(profile.layers)
    by = {(o.kind, o.layer): o for o in ops}
    out: list[RefTensor] = []
    for i, layer in enumerate(profile.layers):
        action = plan.actions[i]
        f_i = by[(FORWARD, i)]
        b_i = by[(BACKWARD, i)]
        f_above = by[(FORWARD, i + 1)] if i + 1 < n else f_i
        if action is RECOMPUTE:
            free = f_above.end
        elif action is SWAP:
            free = max(by[(COPY_OUT, i)].end, f_above.end)
        else:
            free = b_i.end
        out.append(RefTensor("saved", i, layer.product_bytes, f_i.start, free))
        out.append(RefTensor("fwd_work", i, layer.fwd_work_bytes, f_i.start, f_i.end))
        out.append(RefTensor("bwd_work", i, layer.bwd_work_bytes, b_i.start, b_i.end))
        if action is SWAP:
            cb = by[(COPY_BACK, i)]
            out.append(RefTensor("copied_back", i, layer.product_bytes, cb.start, b_i.end))
        if action is RECOMPUTE:
            r = by[(RECOMP, i)]
            out.append(RefTensor("regenerated", i, layer.product_bytes, r.start, b_i.end))
            out.append(RefTensor("recompute_work", i, layer.fwd_work_bytes, r.start, r.end))
    return out


def _peak(static_bytes: int, tensors: tuple[RefTensor, ...]) -> int:
    """Largest device memory at any instant, sweeping explicit events.

    At each instant the frees happen first, then the allocations (the spec's
    rule), then the level is measured. So a tensor is present on the
    half-open interval `[alloc, free)`; one allocated and freed at the same
    instant (the scratch of a zero-duration operation) is never present:
    its free comes first, which is the literal reading of the rule the lead
    settled on (commit 7eba334).
    """
    FREE, ALLOC = 0, 1
    events: list[tuple[float, int, int]] = []
    for t in tensors:
        if not (t.free >= t.alloc):
            raise RuntimeError(f"tensor freed before it is allocated: {t}")
        if t.nbytes == 0 or t.free == t.alloc:
            continue
        events.append((t.alloc, ALLOC, t.nbytes))
        events.append((t.free, FREE, t.nbytes))
    events.sort(key=lambda e: (e[0], e[1]))
    level = peak = static_bytes
    k = 0
    while k < len(events):
        instant = events[k][0]
        while k < len(events) and events[k][0] == instant:
            _, phase, nbytes = events[k]
            level += nbytes if phase == ALLOC else -nbytes
            k += 1
        peak = max(peak, level)
    if level != static_bytes:
        raise RuntimeError(f"memory did not return to static_bytes: {level}")
    return peak


def reference_simulate(
    profile: Profile, plan: Plan, *, free_copies: Collection[int] = ()
) -> tuple[float, int]:
    """(makespan, peak_bytes) of `plan` on `profile` by the reference reading of the spec."""
    result = reference_run(profile, plan, free_copies=free_copies)
    return result.makespan, result.peak_bytes
