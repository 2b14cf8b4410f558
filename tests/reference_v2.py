"""An independent, slow, event-by-event reading of cost model version 2 (tests only).

Written from the text of `shared/spec/cost-model.md` (version 2) alone: it
does not read `planopt/simulate.py` or any solver, and it imports nothing from
planopt. It takes the plain JSON dicts (a `planopt.profile/2` or
`planopt.profile/1` profile and a `planopt.plan/1` plan) so that where it and
planopt disagree, one of the two readings of the spec is wrong.

The structure follows the spec's sections:

1. *The network* / *The plan*: each layer's products (internals and output)
   and their backward readers; the recompute runs and the step of each
   run's block; `need(i)`; the plan's ranges checked against it.
2. *Execution*: a discrete-event simulation of three resources (the compute
   stream, D2H, H2D), each running one operation at a time in its own order,
   each starting its next operation as soon as the spec's conditions hold.
3. *Memory*: a second pass that lists every tensor of the spec's memory table
   with its allocation and free instants, then sweeps the instants (frees
   before allocations at the same instant) for the peak.

Readings of the spec where its text could be read two ways (each one is the
reading this module implements):

- *Last backward reader.* "The reader that runs last" is taken literally: the
  reader whose read ends last in time (the largest end instant). The spec's
  parenthesis "B_i before B_{i+1} before the block at u" is then the priority
  order, and it always agrees with time: a block at `u` (`u = t` or `t+1`,
  with `t >= i+1`) runs before `B_u`, so before `B_{i+1}`, which runs before
  `B_i`. In particular a base read by the block at `u = t+1` *and* by
  `B_{i+1}` or `B_i` is freed after that `B`, never after the block.
- *The block as a reader.* The block reads its base until the end of its
  first forward `F_{k+1}` in the block, so a base whose only backward reader
  is the block is freed (kept layer, or copied-back part of a swapped layer)
  at the end of that forward.
- *Whose block.* "The recompute block of the run starting at i+1" reads layer
  `i`'s output only when a run *starts* at `i+1`: layer `i+1` is recompute and
  layer `i` is not (or `i = -1`). When `i` and `i+1` are in the same run, the
  output of `i` is used by `F_{i+1}` inside the block, a forward use.
- *What a swap copies.* `c_i` is `s_i` (when `s_i > 0`) plus `o_i` exactly when
  the output has a backward reader, the block above counting as one. So a
  swapped layer whose output's only reader is the block above copies `o_i`
  and its `need(i)` is that block's step (case "conv0 swapped: its output is
  copied only because relu1 above is recomputed"). With no reader at all,
  `c_i = 0`: both copies still run and take `transfer_latency`.
- *Parts of a copy.* The copied-back `c_i` is allocated whole at the start of
  the copy back; its internals part is freed at the end of `B_i`, its output
  part at the end of the output's last backward reader.
- *Regenerated products without a backward reader* are freed at the end of
  their forward use in the block: internals at the end of their own forward,
  an output at the end of `F_{j+1}` in the block, the run's top output at the
  end of its own forward (when `u = t` and `saves_output_t` is false).
- *A product with no backward reader* follows that rule whatever the action:
  a swapped layer's output without a reader is freed at the end of
  `F_{i+1}` (it is not in `c_i`, so it need not wait for the copy out).
- *"End of the step"* (parameter gradients) is after the step: they are
  allocated at the start of `B_i` and are still held at the instant `T` (the
  optimizer reads them after the step), so their free is recorded as `inf`.
  Read instead as an ordinary free at the instant `T` (frees first), the
  parameter gradients of a zero-time `B_i` starting at `T` would never count;
  the two readings differ only there. (This module first took the second
  reading; a black-box comparison with `planopt.simulate` on random chains
  disagreed only on such chains, and "held to the end of the step" reads
  better as the first.)
- *need(i)* is the largest step among `i` (internals, or `saves_output_i`),
  `i+1` (`saves_input_{i+1}`) and the block above; `i` when none reads
  anything (then `c_i = 0` and any `prefetch_at` in `[i, L-1]` is valid).
- *Instants.* A tensor is present on `[alloc, free)`: at an instant the frees
  happen first, then the allocations, then memory is measured. So a tensor
  allocated and freed at the same instant (scratch of a zero-time operation)
  never counts. This is also the version-1 reference's reading.
- *Issue order.* When a backward step is issued, its copies back are enqueued
  at that instant, before any operation starts at that instant; the H2D
  queue is strictly first-in first-out (a copy back whose copy out has not
  ended holds up those behind it: "the previous copy back has ended").
- *Defaults.* `/2`: the flags and gradient sizes default to false/0 (spec);
  `fwd_work_bytes`, `bwd_work_bytes` (spec: default 0) and `saved_bytes` (the
  spec names no default; read as 0) may be absent; `transfer_latency` absent
  reads as 0. `/1` layers: `out_bytes = saved_bytes`, `saved_bytes = 0`,
  `saves_output = true`, `saves_input = false`, both gradients 0, the
  scratch sizes as given.
- *Plan fields.* `prefetch_at`/`swap_wait` other than null on a non-swap
  layer are refused (they mean nothing there). A plan's `profile`
  fingerprint is not checked: the spec does not define how it is computed.
- `input_grad_bytes` of layer 0 other than 0 is refused (spec: "must be 0").

Tensors carry their size as `nbytes` (as in the version-1 reference), and
each one is one row of the memory table: `internals`, `output`,
`fwd_scratch` (forward pass); `copied_internals`, `copied_output` (a swapped
layer's `c_i`, one tensor per part); `regen_internals`, `regen_output`,
`regen_fwd_scratch` (a recompute block); `input_grad`, `param_grad`,
`bwd_scratch` (backward).

`random_v2_chain` and `random_valid_plan` at the end draw random `/2`
profiles with real layers' flag mix and random valid plans for them, for
cross-checking planopt's simulator and solvers against this reference.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from dataclasses import dataclass
from typing import Any

PROFILE_V2 = "planopt.profile/2"
PROFILE_V1 = "planopt.profile/1"
PLAN_FORMAT = "planopt.plan/1"

KEEP, SWAP, RECOMPUTE = "keep", "swap", "recompute"
ACTIONS = (KEEP, SWAP, RECOMPUTE)

COMPUTE, D2H, H2D = "compute", "d2h", "h2d"
FORWARD, RECOMP, BACKWARD = "forward", "recompute", "backward"
COPY_OUT, COPY_BACK = "copy_out", "copy_back"


# -- results ---------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One executed operation: `kind` on `layer`, on `resource`, from `start` to `end`."""

    resource: str
    kind: str
    layer: int
    start: float
    end: float


@dataclass(frozen=True)
class Tensor:
    """One device allocation of the memory table: `nbytes` held on `[alloc, free)`."""

    what: str
    layer: int
    nbytes: int
    alloc: float
    free: float


@dataclass(frozen=True)
class RefV2Result:
    """The reference's figures and the evidence behind them."""

    makespan: float
    peak_bytes: int
    operations: tuple[Op, ...]
    tensors: tuple[Tensor, ...]
    need: tuple[int | None, ...]  # need(i) for swapped layers, None elsewhere
    static_bytes: int

    def op(self, kind: str, layer: int) -> Op:
        """The operation of `kind` on `layer` (each occurs at most once)."""
        (found,) = [o for o in self.operations if o.kind == kind and o.layer == layer]
        return found

    def memory_at(self, instant: float) -> int:
        """Device memory at `instant`, after that instant's frees and allocations."""
        return self.static_bytes + sum(
            t.nbytes for t in self.tensors if t.alloc <= instant < t.free
        )


# -- reading the documents ---------------------------------------------------------


@dataclass(frozen=True)
class ChainLayer:
    """One layer under version 2 (a `/1` layer already read as version 2)."""

    name: str
    fwd: float
    bwd: float
    out_bytes: int
    saved_bytes: int
    saves_input: bool
    saves_output: bool
    input_grad_bytes: int
    param_grad_bytes: int
    fwd_work_bytes: int
    bwd_work_bytes: int


@dataclass(frozen=True)
class Chain:
    """A profile: the layers, the resident bytes and the host link."""

    layers: tuple[ChainLayer, ...]
    static_bytes: int
    d2h_bandwidth: float
    h2d_bandwidth: float
    transfer_latency: float


@dataclass(frozen=True)
class PlanV2:
    """A plan: one action per layer, `prefetch_at` and `swap_wait` (None when absent)."""

    actions: tuple[str, ...]
    prefetch_at: tuple[int | None, ...]
    swap_wait: tuple[int | None, ...]


def _where(i: int, name: Any) -> str:
    return f"layer {i} ({name!r})" if isinstance(name, str) else f"layer {i}"


def _seconds(raw: dict, key: str, at: str, default: float | None = None) -> float:
    value = raw.get(key, default)
    if value is None:
        raise ValueError(f"{at}: field {key!r} is required")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{at}: {key} must be a number, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{at}: {key} must be finite and >= 0, got {value!r}")
    return float(value)


def _size(raw: dict, key: str, at: str, default: int | None = None) -> int:
    value = raw.get(key, default)
    if value is None:
        raise ValueError(f"{at}: field {key!r} is required")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{at}: {key} must be an integer >= 0, got {value!r}")
    return value


def _flag(raw: dict, key: str, at: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{at}: {key} must be a boolean, got {value!r}")
    return value


def _bandwidth(raw: dict, key: str) -> float:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"device: {key} must be a number > 0, got {value!r}")
    return float(value)


def _layer_v2(raw: dict, at: str) -> ChainLayer:
    return ChainLayer(
        name=raw.get("name", ""),
        fwd=_seconds(raw, "fwd", at),
        bwd=_seconds(raw, "bwd", at),
        out_bytes=_size(raw, "out_bytes", at),
        saved_bytes=_size(raw, "saved_bytes", at, 0),
        saves_input=_flag(raw, "saves_input", at),
        saves_output=_flag(raw, "saves_output", at),
        input_grad_bytes=_size(raw, "input_grad_bytes", at, 0),
        param_grad_bytes=_size(raw, "param_grad_bytes", at, 0),
        fwd_work_bytes=_size(raw, "fwd_work_bytes", at, 0),
        bwd_work_bytes=_size(raw, "bwd_work_bytes", at, 0),
    )


def _layer_v1(raw: dict, at: str) -> ChainLayer:
    """The spec's last section: the one saved size is the output, read by `B_i`."""
    return ChainLayer(
        name=raw.get("name", ""),
        fwd=_seconds(raw, "fwd", at),
        bwd=_seconds(raw, "bwd", at),
        out_bytes=_size(raw, "saved_bytes", at),
        saved_bytes=0,
        saves_input=False,
        saves_output=True,
        input_grad_bytes=0,
        param_grad_bytes=0,
        fwd_work_bytes=_size(raw, "fwd_work_bytes", at, 0),
        bwd_work_bytes=_size(raw, "bwd_work_bytes", at, 0),
    )


def read_profile(data: dict) -> Chain:
    """A `planopt.profile/2` or `/1` dict as a version-2 chain; bad input raises ValueError."""
    fmt = data.get("format")
    if fmt not in (PROFILE_V2, PROFILE_V1):
        raise ValueError(f"profile: format must be {PROFILE_V2!r} or {PROFILE_V1!r}, got {fmt!r}")
    raw_layers = data.get("layers")
    if not isinstance(raw_layers, list) or not raw_layers:
        raise ValueError("profile: layers must be a non-empty list")
    read = _layer_v1 if fmt == PROFILE_V1 else _layer_v2
    layers = tuple(read(raw, _where(i, raw.get("name"))) for i, raw in enumerate(raw_layers))
    if layers[0].input_grad_bytes != 0:
        raise ValueError(
            f"{_where(0, layers[0].name)}: input_grad_bytes must be 0 for layer 0 "
            f"(its input is the batch), got {layers[0].input_grad_bytes}"
        )
    device = data.get("device")
    if not isinstance(device, dict):
        raise ValueError("profile: device must be an object")
    return Chain(
        layers=layers,
        static_bytes=_size(data, "static_bytes", "profile"),
        d2h_bandwidth=_bandwidth(device, "d2h_bandwidth"),
        h2d_bandwidth=_bandwidth(device, "h2d_bandwidth"),
        transfer_latency=_seconds(device, "transfer_latency", "device", 0.0),
    )


def _index_or_none(raw: dict, key: str, at: str) -> int | None:
    value = raw.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{at}: {key} must be an integer layer index or null, got {value!r}")
    return value


def read_plan(data: dict, chain: Chain) -> PlanV2:
    """A `planopt.plan/1` dict for `chain`, with every index checked against the spec's ranges.

    `prefetch_at` must lie in `[need(i), L-1]`, `swap_wait` in `[i+1, L-1]`.
    """
    if data.get("format") != PLAN_FORMAT:
        raise ValueError(f"plan: format must be {PLAN_FORMAT!r}, got {data.get('format')!r}")
    raw_layers = data.get("layers")
    n = len(chain.layers)
    if not isinstance(raw_layers, list) or len(raw_layers) != n:
        got = len(raw_layers) if isinstance(raw_layers, list) else raw_layers
        raise ValueError(f"plan: layers must hold one entry per profile layer ({n}), got {got}")
    actions, prefetch, wait = [], [], []
    for i, raw in enumerate(raw_layers):
        at = _where(i, chain.layers[i].name)
        if "name" in raw and raw["name"] is not None and raw["name"] != chain.layers[i].name:
            raise ValueError(f"{at}: name must match the profile, got {raw['name']!r}")
        action = raw.get("action")
        if action not in ACTIONS:
            raise ValueError(f"{at}: action must be one of {', '.join(ACTIONS)}, got {action!r}")
        actions.append(action)
        prefetch.append(_index_or_none(raw, "prefetch_at", at))
        wait.append(_index_or_none(raw, "swap_wait", at))
    plan = PlanV2(tuple(actions), tuple(prefetch), tuple(wait))
    _check_ranges(chain, plan)
    return plan


def _check_ranges(chain: Chain, plan: PlanV2) -> None:
    """The spec's valid ranges: `need(i) <= prefetch_at <= L-1`, `i+1 <= swap_wait <= L-1`."""
    n = len(chain.layers)
    for i, action in enumerate(plan.actions):
        at = _where(i, chain.layers[i].name)
        prefetch, wait = plan.prefetch_at[i], plan.swap_wait[i]
        if action != SWAP:
            if prefetch is not None or wait is not None:
                raise ValueError(f"{at}: prefetch_at and swap_wait are only for action swap")
            continue
        low = need(chain, plan.actions, i)
        if prefetch is None:
            raise ValueError(f"{at}: prefetch_at is required for swap, in [{low}, {n - 1}]")
        if not low <= prefetch <= n - 1:
            raise ValueError(
                f"{at}: prefetch_at must be in [need({i}) = {low}, {n - 1}], got {prefetch}"
            )
        if wait is not None and not i + 1 <= wait <= n - 1:
            raise ValueError(f"{at}: swap_wait must be null or in [{i + 1}, {n - 1}], got {wait}")


# -- the network and the plan: runs, blocks, readers, need ------------------------


def recompute_runs(actions: tuple[str, ...]) -> list[tuple[int, int]]:
    """Maximal runs `(k+1, t)` of consecutive recompute layers, bottom to top."""
    runs = []
    i = 0
    while i < len(actions):
        if actions[i] == RECOMPUTE:
            top = i
            while top + 1 < len(actions) and actions[top + 1] == RECOMPUTE:
                top += 1
            runs.append((i, top))
            i = top + 1
        else:
            i += 1
    return runs


def block_step(chain: Chain, top: int) -> int:
    """`u`: `t+1` if layer `t+1` exists and saves its input (the run's top output), else `t`."""
    above = top + 1
    if above < len(chain.layers) and chain.layers[above].saves_input:
        return above
    return top


def run_starting_at(actions: tuple[str, ...], first: int) -> tuple[int, int] | None:
    """The run whose lowest layer is `first`, if a run starts there."""
    for run in recompute_runs(actions):
        if run[0] == first:
            return run
    return None


@dataclass(frozen=True)
class Reader:
    """A backward reader: `B_layer` (kind BACKWARD), or a block's first forward
    `F_layer` in the block (kind RECOMP) which reads the block's base; `step` is
    the backward step that holds it."""

    kind: str
    layer: int
    step: int


def internals_readers(chain: Chain, i: int) -> list[Reader]:
    """Internals are read by `B_i` when there are any."""
    return [Reader(BACKWARD, i, i)] if chain.layers[i].saved_bytes > 0 else []


def output_readers(chain: Chain, actions: tuple[str, ...], i: int) -> list[Reader]:
    """`B_i` if saves_output_i; `B_{i+1}` if saves_input_{i+1}; the block of the run
    starting at `i+1` (its base)."""
    readers = []
    if chain.layers[i].saves_output:
        readers.append(Reader(BACKWARD, i, i))
    if i + 1 < len(chain.layers) and chain.layers[i + 1].saves_input:
        readers.append(Reader(BACKWARD, i + 1, i + 1))
    run = run_starting_at(actions, i + 1)
    if run is not None:
        readers.append(Reader(RECOMP, i + 1, block_step(chain, run[1])))
    return readers


def need(chain: Chain, actions: tuple[str, ...], i: int) -> int:
    """The highest backward step holding a reader of layer `i`'s products (`i` if none)."""
    steps = [r.step for r in internals_readers(chain, i) + output_readers(chain, actions, i)]
    return max([i, *steps])


def copied_bytes(chain: Chain, actions: tuple[str, ...], i: int) -> int:
    """`c_i`: the parts with a backward reader (`s_i`, plus `o_i` if the output has one)."""
    layer = chain.layers[i]
    c = layer.saved_bytes if internals_readers(chain, i) else 0
    if output_readers(chain, actions, i):
        c += layer.out_bytes
    return c


# -- execution: three resources, event by event -----------------------------------


@dataclass(frozen=True)
class ComputeOp:
    """One entry of the compute stream's fixed order, with what it waits for."""

    kind: str  # FORWARD, RECOMP or BACKWARD
    layer: int
    step: int | None  # the backward step it belongs to (None in forward)
    first_of_step: bool  # its end of the op before it issues `step`
    waits_copy_out: tuple[int, ...]  # swap layers whose copy out must have ended
    waits_copy_back: tuple[int, ...]  # swap layers whose copy back must have ended


def compute_stream(chain: Chain, plan: PlanV2) -> list[ComputeOp]:
    """`F_0 .. F_{L-1}`, then backward steps `L-1 .. 0`: each its block (if any), then `B_j`."""
    n = len(chain.layers)
    actions = plan.actions
    stream = []
    for i in range(n):
        waiting = tuple(w for w in range(n) if actions[w] == SWAP and plan.swap_wait[w] == i)
        stream.append(ComputeOp(FORWARD, i, None, False, waiting, ()))
    block_at = {block_step(chain, top): (first, top) for first, top in recompute_runs(actions)}
    for j in range(n - 1, -1, -1):
        first_op = True
        if j in block_at:
            first, top = block_at[j]
            base = first - 1
            for layer in range(first, top + 1):
                wait = (base,) if layer == first and base >= 0 and actions[base] == SWAP else ()
                stream.append(ComputeOp(RECOMP, layer, j, first_op, (), wait))
                first_op = False
        stream.append(ComputeOp(BACKWARD, j, j, first_op, (), _backward_waits(chain, plan, j)))
    return stream


def _backward_waits(chain: Chain, plan: PlanV2, j: int) -> tuple[int, ...]:
    """Swap layers whose products `B_j` reads: `j` if `s_j > 0` or saves_output_j;
    `j-1` if saves_input_j."""
    layer = chain.layers[j]
    waits = []
    if plan.actions[j] == SWAP and (layer.saved_bytes > 0 or layer.saves_output):
        waits.append(j)
    if j >= 1 and plan.actions[j - 1] == SWAP and layer.saves_input:
        waits.append(j - 1)
    return tuple(waits)


def execute(chain: Chain, plan: PlanV2) -> tuple[Op, ...]:
    """Run the three resources event by event; every operation with its start and end."""
    layers = chain.layers
    stream = compute_stream(chain, plan)
    c = [copied_bytes(chain, plan.actions, i) for i in range(len(layers))]
    prefetch_at: dict[int, list[int]] = {}
    for i, action in enumerate(plan.actions):
        if action == SWAP:
            prefetch_at.setdefault(plan.prefetch_at[i], []).append(i)

    next_compute = 0
    running: dict[str, tuple[str, int, float] | None] = {COMPUTE: None, D2H: None, H2D: None}
    d2h_queue: deque[int] = deque()
    h2d_queue: deque[int] = deque()
    copy_out_end: dict[int, float] = {}
    copy_back_end: dict[int, float] = {}
    events: list[tuple[float, int, str]] = []  # (end instant, sequence, resource)
    sequence = itertools.count()
    done: list[Op] = []

    def begin(resource: str, kind: str, layer: int, now: float, duration: float) -> None:
        running[resource] = (kind, layer, now)
        heapq.heappush(events, (now + duration, next(sequence), resource))

    def compute_ready(op: ComputeOp) -> bool:
        return all(w in copy_out_end for w in op.waits_copy_out) and all(
            w in copy_back_end for w in op.waits_copy_back
        )

    def start_what_can(now: float) -> None:
        nonlocal next_compute
        if running[COMPUTE] is None and next_compute < len(stream):
            op = stream[next_compute]
            if compute_ready(op):
                duration = layers[op.layer].bwd if op.kind == BACKWARD else layers[op.layer].fwd
                begin(COMPUTE, op.kind, op.layer, now, duration)
                next_compute += 1
        if running[D2H] is None and d2h_queue:
            i = d2h_queue.popleft()
            begin(D2H, COPY_OUT, i, now, chain.transfer_latency + c[i] / chain.d2h_bandwidth)
        if running[H2D] is None and h2d_queue and h2d_queue[0] in copy_out_end:
            i = h2d_queue.popleft()
            begin(H2D, COPY_BACK, i, now, chain.transfer_latency + c[i] / chain.h2d_bandwidth)

    def finish(resource: str, now: float) -> None:
        kind, layer, start = running[resource]
        running[resource] = None
        done.append(Op(resource, kind, layer, start, now))
        if kind == COPY_OUT:
            copy_out_end[layer] = now
        elif kind == COPY_BACK:
            copy_back_end[layer] = now
        else:
            if kind == FORWARD and plan.actions[layer] == SWAP:
                d2h_queue.append(layer)  # enqueued when F_i ends
            if next_compute < len(stream) and stream[next_compute].first_of_step:
                # Backward step j is issued: its copies back, higher layer index first.
                for i in sorted(prefetch_at.get(stream[next_compute].step, ()), reverse=True):
                    h2d_queue.append(i)

    start_what_can(0.0)
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, _, resource = heapq.heappop(events)
            finish(resource, now)
        start_what_can(now)
    if next_compute < len(stream) or d2h_queue or h2d_queue:
        raise RuntimeError("reference v2: the plan cannot execute (deadlock)")
    return tuple(done)


# -- memory: every tensor of the table, then the peak -----------------------------


class _Times:
    """Start/end instants of the executed operations, by (kind, layer)."""

    def __init__(self, ops: tuple[Op, ...]) -> None:
        self.by = {(o.kind, o.layer): o for o in ops}
        self.makespan = max(o.end for o in ops)

    def __call__(self, kind: str, layer: int) -> Op:
        return self.by[(kind, layer)]

    def read_end(self, readers: list[Reader]) -> float:
        """End of the last backward reader: the latest end among the readers' reads."""
        return max(self(r.kind, r.layer).end for r in readers)


def tensors(chain: Chain, plan: PlanV2, ops: tuple[Op, ...]) -> list[Tensor]:
    """Every allocation of the spec's memory table, with its instants."""
    at = _Times(ops)
    out: list[Tensor] = []
    for i in range(len(chain.layers)):
        out += _forward_tensors(chain, plan, at, i)
        out += _backward_tensors(chain, at, i)
        if plan.actions[i] == SWAP:
            out += _copy_back_tensors(chain, plan, at, i)
    for first, top in recompute_runs(plan.actions):
        out += _block_tensors(chain, plan, at, first, top)
    return out


def _forward_tensors(chain: Chain, plan: PlanV2, at: _Times, i: int) -> list[Tensor]:
    """Internals, output and scratch of `F_i` in the forward pass."""
    layer = chain.layers[i]
    action = plan.actions[i]
    f = at(FORWARD, i)
    above_end = at(FORWARD, i + 1).end if i + 1 < len(chain.layers) else f.end

    internals = internals_readers(chain, i)
    if not internals or action == RECOMPUTE:
        internals_free = f.end
    elif action == KEEP:
        internals_free = at(BACKWARD, i).end
    else:
        internals_free = max(at(COPY_OUT, i).end, f.end)

    readers = output_readers(chain, plan.actions, i)
    if not readers or action == RECOMPUTE:
        output_free = above_end
    elif action == KEEP:
        output_free = at.read_end(readers)
    else:
        output_free = max(at(COPY_OUT, i).end, above_end)

    return [
        Tensor("internals", i, layer.saved_bytes, f.start, internals_free),
        Tensor("output", i, layer.out_bytes, f.start, output_free),
        Tensor("fwd_scratch", i, layer.fwd_work_bytes, f.start, f.end),
    ]


def _backward_tensors(chain: Chain, at: _Times, i: int) -> list[Tensor]:
    """What `B_i` allocates: the gradient of `x_i`, parameter gradients, scratch."""
    layer = chain.layers[i]
    b = at(BACKWARD, i)
    out = [
        Tensor("param_grad", i, layer.param_grad_bytes, b.start, math.inf),  # past the step
        Tensor("bwd_scratch", i, layer.bwd_work_bytes, b.start, b.end),
    ]
    if i >= 1:  # g_0 is 0 (checked when the profile is read)
        out.append(
            Tensor("input_grad", i, layer.input_grad_bytes, b.start, at(BACKWARD, i - 1).end)
        )
    return out


def _copy_back_tensors(chain: Chain, plan: PlanV2, at: _Times, i: int) -> list[Tensor]:
    """`c_i`, allocated at the start of its copy back, each part freed after its last reader."""
    layer = chain.layers[i]
    start = at(COPY_BACK, i).start
    out = []
    internals = internals_readers(chain, i)
    if internals:
        out.append(Tensor("copied_internals", i, layer.saved_bytes, start, at.read_end(internals)))
    readers = output_readers(chain, plan.actions, i)
    if readers:
        out.append(Tensor("copied_output", i, layer.out_bytes, start, at.read_end(readers)))
    return out


def _block_tensors(chain: Chain, plan: PlanV2, at: _Times, first: int, top: int) -> list[Tensor]:
    """The block regenerating `first .. top`: each forward's products and scratch."""
    out = []
    for j in range(first, top + 1):
        layer = chain.layers[j]
        f = at(RECOMP, j)
        internals = internals_readers(chain, j)
        internals_free = at.read_end(internals) if internals else f.end
        readers = output_readers(chain, plan.actions, j)
        if readers:
            output_free = at.read_end(readers)
        else:  # forward use in the block: F_{j+1} there, or its own forward for the top
            output_free = at(RECOMP, j + 1).end if j < top else f.end
        out += [
            Tensor("regen_internals", j, layer.saved_bytes, f.start, internals_free),
            Tensor("regen_output", j, layer.out_bytes, f.start, output_free),
            Tensor("regen_fwd_scratch", j, layer.fwd_work_bytes, f.start, f.end),
        ]
    return out


def peak_bytes(static_bytes: int, held: list[Tensor]) -> int:
    """Largest device memory at any instant; frees before allocations at an instant."""
    FREE, ALLOC = 0, 1
    events = []
    for t in held:
        if not t.free >= t.alloc:
            raise RuntimeError(f"reference v2: tensor freed before it is allocated: {t}")
        if t.nbytes > 0 and t.free > t.alloc:
            events += [(t.alloc, ALLOC, t.nbytes), (t.free, FREE, -t.nbytes)]
    events.sort(key=lambda e: (e[0], e[1]))
    level = peak = static_bytes
    k = 0
    while k < len(events):
        instant = events[k][0]
        while k < len(events) and events[k][0] == instant:
            level += events[k][2]
            k += 1
        peak = max(peak, level)
    if level != static_bytes:
        raise RuntimeError(f"reference v2: memory ends at {level}, not static_bytes")
    return peak


# -- entry point -------------------------------------------------------------------


def reference_v2(profile: dict, plan: dict) -> RefV2Result:
    """Execute `plan` (a `planopt.plan/1` dict) on `profile` (a `/2` or `/1` dict)."""
    chain = read_profile(profile)
    parsed = read_plan(plan, chain)
    ops = execute(chain, parsed)
    held = tensors(chain, parsed, ops)
    needs = tuple(
        need(chain, parsed.actions, i) if a == SWAP else None for i, a in enumerate(parsed.actions)
    )
    return RefV2Result(
        makespan=max(o.end for o in ops),
        peak_bytes=peak_bytes(chain.static_bytes, held),
        operations=ops,
        tensors=tuple(held),
        need=needs,
        static_bytes=chain.static_bytes,
    )


def need_of_every_layer(profile: dict, actions: list[str]) -> list[int]:
    """`need(i)` for every layer under `actions` (for plan generators)."""
    chain = read_profile(profile)
    acts = tuple(actions)
    return [need(chain, acts, i) for i in range(len(chain.layers))]


# -- random version-2 chains and valid plans (for cross-checks) -------------------

# kind -> (saves_input, saves_output, internals as a multiple of the output, has parameters)
V2_KINDS: dict[str, tuple[bool, bool, float, bool]] = {
    "conv": (True, False, 0.0, True),
    "linear": (True, False, 0.0, True),
    "norm": (True, False, 0.0, True),
    "relu": (False, True, 0.0, False),
    "sigmoid": (False, True, 0.0, False),
    "softmax": (False, True, 0.0, False),
    "dropout": (False, False, 0.5, False),  # the mask
    "attention": (True, False, 4.0, True),  # its input and the attention probabilities
    "add": (False, False, 0.0, False),  # a residual add saves nothing
}


def random_v2_chain(rng: random.Random, n: int, *, exact: bool = True) -> dict:
    """A random `planopt.profile/2` dict of `n` layers drawn from real layers' kinds.

    `exact` draws dyadic times (multiples of 1/8, sometimes 0) and power-of-two
    bandwidths, so sums are exact and ties between instants are real ties;
    otherwise general floats. Each layer's input gradient has the size of its
    input (the output below) unless that input needs none; layer 0 has none.
    """

    def secs() -> float:
        if rng.random() < 0.1:
            return 0.0
        return rng.randint(1, 64) / 8 if exact else rng.uniform(1e-4, 5.0)

    def size(high: int) -> int:
        return 0 if rng.random() < 0.1 else rng.randint(1, high)

    layers = []
    below = 0
    for i in range(n):
        kind = rng.choice(sorted(V2_KINDS))
        saves_in, saves_out, inner, params = V2_KINDS[kind]
        out = size(1000)
        layers.append(
            {
                "name": f"{kind}{i}",
                "fwd": secs(),
                "bwd": secs(),
                "out_bytes": out,
                "saved_bytes": round(inner * out),
                "saves_input": saves_in,
                "saves_output": saves_out,
                "input_grad_bytes": below if i > 0 and rng.random() < 0.8 else 0,
                "param_grad_bytes": size(200) if params else 0,
                "fwd_work_bytes": size(300) if rng.random() < 0.4 else 0,
                "bwd_work_bytes": size(300) if rng.random() < 0.4 else 0,
                "signature": kind,
            }
        )
        below = out
    if exact:
        bandwidths = [rng.choice([1.0, 4.0, 16.0, 64.0, 1024.0]) for _ in range(2)]
        latency = rng.choice([0.0, 0.125, 0.5])
    else:
        bandwidths = [rng.uniform(10.0, 1000.0) for _ in range(2)]
        latency = 0.0 if rng.random() < 0.3 else rng.uniform(0.0, 0.5)
    return {
        "format": PROFILE_V2,
        "name": f"random-v2-{n}",
        "device": {
            "name": "dev",
            "h2d_bandwidth": bandwidths[0],
            "d2h_bandwidth": bandwidths[1],
            "transfer_latency": latency,
        },
        "static_bytes": size(1000),
        "layers": layers,
    }


def random_valid_plan(rng: random.Random, profile: dict) -> dict:
    """A random valid `planopt.plan/1` dict for `profile`: a random action mix,
    `prefetch_at` anywhere in `[need(i), L-1]`, `swap_wait` null or in `[i+1, L-1]`."""
    names = [raw.get("name") for raw in profile["layers"]]
    n = len(names)
    weights = [rng.random() + 0.05 for _ in ACTIONS]
    actions = rng.choices(ACTIONS, weights=weights, k=n)
    needs = need_of_every_layer(profile, actions)
    entries = []
    for i, action in enumerate(actions):
        entry: dict[str, Any] = {"name": names[i], "action": action}
        if action == SWAP:
            entry["prefetch_at"] = rng.randint(needs[i], n - 1)
            wait = rng.randint(i + 1, n - 1) if i < n - 1 and rng.random() < 0.4 else None
            entry["swap_wait"] = wait
        entries.append(entry)
    return {"format": PLAN_FORMAT, "layers": entries}
