"""A cheap lower bound on the optimal makespan, for nets of any size.

It relaxes the spec to a small mixed-integer program over the actions alone
(no prefetch or wait choices, no exact schedule), keeping only facts every
plan must obey:

* the compute stream runs every forward, backward and recomputation;
* all copies back run one at a time on H2D, none before the forward pass
  ends, and every copy back of a layer >= t ends before `B_t` starts;
* a swapped layer's copy out (after `F_i`) and copy back precede `B_i`,
  and D2H runs the copies out one at a time;
* memory (cost model v2): strictly inside `F_i` (positive duration) every
  kept layer's read products below `i - 1` are alive besides `x_i` (the
  output of `i - 1`), the internals and output of `i`, the internals of
  `i - 1` if kept, and the forward scratch; inside `B_t` every kept layer's
  read products below `t` are alive besides what `B_t` reads, the gradients
  `g_t` and `g_{t+1}`, the parameter gradients allocated since `B_{L-1}` and
  its scratch (a product only a recompute block reads is left out: that
  keeps the rows below what any plan holds);
* the copy engines cannot free memory faster than they move bytes. A
  swapped `s_j` stays on the device until its copy out ends, and no copy out
  of a layer `>= k` starts before `F_k` ends, so inside `F_i` the swapped
  layers `k .. i-2` still hold at least their bytes minus what D2H can move
  between the end of `F_k` and the start of `F_i`. The compute stream may
  stall in forward (`W_i`, the stall before `F_i`) to give it that time, and
  every stall adds to the makespan. Symmetrically, a copy back holds its
  bytes from its start, and the copies back of the swapped layers `k .. t-1`
  that have not started when `B_t` starts must all run before `B_k` starts,
  so inside `B_t` they hold at least their bytes minus what H2D moves in
  that interval (stretched by backward stalls and recomputation, `U_t`).
  Transfer latency only makes copies slower, so leaving it out keeps the
  bound valid.

Any plan's actions satisfy all of these, so the program's optimum (or the
MIP solver's proven bound under a time or work limit, or the LP bound when
`relax=True`) is at most the true optimum.

Units: `solvers.model`'s policy, time in linear units and memory in units
of the largest saved tensor. A work limit stops HiGHS at a point its
work counter fixes (`solvers.backends.highs`), so a work-limited bound is
the same on any machine.
"""

from __future__ import annotations

import math
import time

import pulp

from planopt.profile import Profile
from planopt.work import WorkMeter
from solvers.backends.highs import solve_with_highs
from solvers.model.units import horizon_seconds, linear_memory, time_scale

# Building the program in PuLP costs about this many work units per layer
# (about 3 ms a layer on GPT-48/96, measured), whatever the solve's limit.
BUILD_UNITS_PER_LAYER = 3e-3


def relaxation_bound(
    profile: Profile,
    budget: float,
    *,
    time_limit: float | None = None,
    work_limit: float | None = None,
    relax: bool = False,
    threads: int = 1,
    meter: WorkMeter | None = None,
) -> float | None:
    """A proven lower bound in seconds, or None if even the relaxation cannot fit `budget`.

    `meter`, when given, is charged the work: building (`BUILD_UNITS_PER_LAYER`)
    and solving.
    """
    # NOTE: building the model in PuLP takes about 2 ms a layer, whatever the
    # limit (10^4 layers: longer than a 5 s limit before HiGHS starts): the
    # build looks at the deadline and, past it, gives T_ideal (still a bound).
    deadline = None if time_limit is None else time.monotonic() + time_limit

    def late(step: int) -> bool:
        return deadline is not None and step % 256 == 0 and time.monotonic() >= deadline

    layers = profile.layers
    n = len(layers)
    dev = profile.device
    if not horizon_seconds(profile) > 0:  # nothing takes time: the bound is T_ideal itself
        return profile.t_ideal
    # Version 2: a layer's products that every plan's backward reads (its
    # internals, its output when B_i or B_{i+1} reads it) are what keeping it
    # holds and what swapping it copies at least (`copied`); a recompute block
    # above may add its output, which only makes real plans use more.
    saves_in = [x.saves_input for x in layers] + [False]
    read = [x.saves_output or saves_in[i + 1] for i, x in enumerate(layers)]
    copied = [x.saved_bytes + (x.out_bytes if read[i] else 0) for i, x in enumerate(layers)]
    times = time_scale(profile)
    t_unit = times.from_linear(1.0)  # seconds per linear unit
    memory = linear_memory(profile)
    cap = memory.capacity(budget, profile.static_bytes)
    m_unit = memory.unit
    f = [times.linear(layer.fwd) for layer in layers]
    b = [times.linear(layer.bwd) for layer in layers]
    s = [memory.units(c) for c in copied]
    out = [memory.units(x.out_bytes) for x in layers]
    internals = [memory.units(x.saved_bytes) for x in layers]
    d_out = [times.linear(dev.d2h_seconds(c)) for c in copied]
    d_in = [times.linear(dev.h2d_seconds(c)) for c in copied]
    # What B_t needs besides kept products below: what it reads, the gradients
    # g_t and g_{t+1}, every parameter gradient allocated so far, its scratch.
    backward_fixed = []
    param_grads = 0
    for t in range(n - 1, -1, -1):
        x = layers[t]
        param_grads += x.param_grad_bytes
        reads = x.saved_bytes + (x.out_bytes if x.saves_output else 0)
        reads += layers[t - 1].out_bytes if t > 0 and x.saves_input else 0
        grads = x.input_grad_bytes + (layers[t + 1].input_grad_bytes if t + 1 < n else 0)
        backward_fixed.append(memory.units(reads + grads + param_grads + x.bwd_work_bytes))
    backward_fixed.reverse()
    forward_total = math.fsum(f)
    f_end: list[float] = []
    b_upto: list[float] = []
    for i in range(n):  # exact prefix sums, quadratic in n: the deadline is looked at
        if late(i):
            return profile.t_ideal
        f_end.append(math.fsum(f[: i + 1]))
        b_upto.append(math.fsum(b[: i + 1]))

    cat = pulp.LpContinuous if relax else pulp.LpBinary
    prob = pulp.LpProblem("planopt_bound", pulp.LpMinimize)
    keep = [pulp.LpVariable(f"k{i}", 0, 1, cat) for i in range(n)]
    swap = [pulp.LpVariable(f"w{i}", 0, 1, cat) for i in range(n)]
    rec = [pulp.LpVariable(f"r{i}", 0, 1, cat) for i in range(n)]
    makespan = pulp.LpVariable("T", lowBound=times.linear(profile.t_ideal))
    prob += makespan
    for i in range(n):
        prob += keep[i] + swap[i] + rec[i] == 1
    # Compute-stream time beyond sum(fwd) + sum(bwd): `stall[i]` waited in forward
    # before F_i; `extra[t]` spent in backward before B_t (stalls and
    # recomputation; every recomputed layer >= t is regenerated before B_t).
    stall = [pulp.LpVariable(f"W{i}", lowBound=0) for i in range(n)]
    extra = [pulp.LpVariable(f"U{t}", lowBound=0) for t in range(n)]
    forward_end = forward_total + stall[n - 1]
    # (a suffix sum: a recomputed layer is regenerated before B_t but not
    # necessarily between B_{t+1} and B_t)
    rec_from = [pulp.LpVariable(f"X{t}", lowBound=0) for t in range(n + 1)]
    prob += rec_from[n] == 0
    prob += stall[0] == 0
    for t in range(n - 1, -1, -1):
        if late(t):
            return profile.t_ideal
        if t > 0:
            prob += stall[t] >= stall[t - 1]
        if t < n - 1:
            prob += extra[t] >= extra[t + 1]
        prob += rec_from[t] == rec_from[t + 1] + f[t] * rec[t]
        prob += extra[t] >= rec_from[t]
    prob += makespan >= forward_end + math.fsum(b) + extra[0]

    # Suffix sums of copy-back time (H2D) and copy-out time (D2H).
    back_from = [pulp.LpVariable(f"H{t}", lowBound=0) for t in range(n + 1)]
    out_from = [pulp.LpVariable(f"D{t}", lowBound=0) for t in range(n + 1)]
    prob += back_from[n] == 0
    prob += out_from[n] == 0
    for t in range(n - 1, -1, -1):
        if late(t):
            return profile.t_ideal
        prob += back_from[t] == back_from[t + 1] + d_in[t] * swap[t]
        prob += out_from[t] == out_from[t + 1] + d_out[t] * swap[t]
        # Copies back of layers >= t run after the forward pass, before B_t.
        prob += extra[t] >= back_from[t] - (b_upto[n - 1] - b_upto[t])
        prob += makespan >= (f_end[t - 1] if t else 0.0) + stall[t] + out_from[t]
        prob += makespan >= f_end[t] + stall[t] + (d_out[t] + d_in[t]) * swap[t] + b_upto[t]

    # Kept bytes below each layer, then the memory checks.
    kept_below = [pulp.LpVariable(f"K{i}", lowBound=0) for i in range(n + 1)]
    prob += kept_below[0] == 0
    for i in range(n):
        prob += kept_below[i + 1] == kept_below[i] + s[i] * keep[i]
    # Swapped bytes below each layer, and what the copy engines move per time unit.
    swapped_below = [pulp.LpVariable(f"S{i}", lowBound=0) for i in range(n + 1)]
    prob += swapped_below[0] == 0
    for i in range(n):
        prob += swapped_below[i + 1] == swapped_below[i] + s[i] * swap[i]
    out_rate = dev.d2h_bandwidth * t_unit / m_unit
    in_rate = dev.h2d_bandwidth * t_unit / m_unit
    for i, layer in enumerate(layers):
        if late(i):
            return profile.t_ideal
        # Inside F_i: its input x_i (any action frees it no earlier than F_i's end),
        # its internals and output, its scratch, the kept products below i-1 and
        # the internals of i-1 when kept.
        fixed = internals[i] + out[i] + memory.units(layer.fwd_work_bytes)
        if layer.fwd > 0 and i == 0:
            # F_0's check has no decision in it: a constant, which PuLP refuses
            # as a constraint (and compares without tolerance).
            if fixed > cap * (1 + 1e-12) + 1e-12:
                return None
        elif layer.fwd > 0:
            held = _still_held(
                prob, f"R{i}", swapped_below, i - 1, out_rate, _fwd_gap(f_end, stall, i)
            )
            below = kept_below[i - 1] + internals[i - 1] * keep[i - 1]
            prob += below + held + out[i - 1] + fixed <= cap
        # Inside B_i: the kept products below i (the output of i-1 once, when B_i
        # reads it), and `backward_fixed`.
        if layer.bwd > 0:
            held = _still_held(prob, f"Q{i}", swapped_below, i, in_rate, _bwd_gap(b_upto, extra, i))
            below = kept_below[i]
            if i > 0 and layer.saves_input and read[i - 1]:
                # x_i is counted once, in what B_i reads, whether kept or copied back
                below = below - out[i - 1] * (keep[i - 1] + swap[i - 1])
            prob += below + held + backward_fixed[i] <= cap

    if deadline is not None:
        time_limit = max(0.01, deadline - time.monotonic())  # what the build left
    solver = solve_with_highs(prob, work_limit=work_limit, timeLimit=time_limit, threads=threads)
    if meter is not None:
        meter.charge(BUILD_UNITS_PER_LAYER * n + solver.work(prob))
    status = pulp.LpStatus[prob.status]
    if status == "Infeasible":
        return None
    if relax:
        # NOTE: PuLP reports a HiGHS LP stopped by its time limit as "Optimal"
        # (solution status "integer feasible"); the objective of a simplex cut
        # short is no bound (GPT-48 at 70%: 11.97% over T_ideal, above a plan
        # at 3.58%). Only a solution PuLP calls optimal gives the LP bound.
        solved = status == "Optimal" and getattr(prob, "sol_status", None) == (
            pulp.LpSolutionOptimal
        )
        bound = pulp.value(prob.objective) if solved else None
    else:
        # NOTE: "optimal" for a MIP means within HiGHS's relative gap, so the
        # proven dual bound is used, not the incumbent's objective.
        bound = prob.solverModel.getInfo().mip_dual_bound
        if bound is None or not math.isfinite(bound):
            bound = None
    if bound is None:
        return profile.t_ideal
    return max(profile.t_ideal, times.from_linear(bound) * (1 - 1e-7))


def _window_starts(top: int, n: int) -> list[int]:
    """The `k` of the windows `k .. top-1` a memory row looks at.

    Any subset of windows gives a valid bound; all of them would make the
    program cubic. The window from layer 0 carries most of the strength (on
    the bundled GPT decoders it alone gives the whole gain); on nets up to
    `_FULL_WINDOWS_UP_TO` layers the nearest `_NEAR` and every power of two
    further down add a little (median bound-to-optimum gap 0.68% -> 0.61% on
    the suite's small instances). Beyond that the extra rows made the LP 4x
    slower for nothing measurable.
    """
    if n > _FULL_WINDOWS_UP_TO:
        return sorted({0, *range(max(0, top - 2), top)})
    ks = {0, *range(max(0, top - _NEAR), top)}
    step = _NEAR * 2
    while top - step > 0:
        ks.add(top - step)
        step *= 2
    return sorted(k for k in ks if k < top)


_NEAR = 8
_FULL_WINDOWS_UP_TO = 256


def _still_held(prob, name: str, swapped_below, top: int, rate: float, gap) -> object:
    """A variable at most the swapped bytes of layers below `top` still on the device,
    given that the copy engine moves `rate` per time unit over `gap(k)`."""
    if top <= 0 or not math.isfinite(rate):
        return 0
    held = pulp.LpVariable(name, lowBound=0)
    for k in _window_starts(top, len(swapped_below) - 1):
        prob += held >= swapped_below[top] - swapped_below[k] - rate * gap(k)
    return held


def _fwd_gap(f_end, stall, i: int):
    """Time from the end of F_k to the start of F_i."""
    return lambda k: (f_end[i - 1] - f_end[k]) + stall[i] - stall[k]


def _bwd_gap(b_upto, extra, t: int):
    """Time from the start of B_t to the start of B_k (k < t)."""
    return lambda k: (b_upto[t] - b_upto[k]) + extra[k] - extra[t]
