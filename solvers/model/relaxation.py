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
  And a swapped layer's bytes stay until its copy out ends (no copy back
  starts before that), so inside `B_t` the swapped layers `k .. t-1` also
  hold at least their bytes minus what D2H moves between the end of `F_k`
  and the start of `B_t`. The two are disjoint bytes (not yet copied out;
  copy back started), so the row adds both. (On GPT-2's traced block x48
  with menus at 70% this raised the LP from 5.10% to 5.68% over T_ideal:
  the LP had swapped the top layers, whose copies out end after the turn.)
  Transfer latency only makes copies slower, so leaving it out keeps the
  bound valid.
* the compute stream after `B_t` starts (`U_0 - U_t`) runs every
  regeneration below t but the recompute run hanging below t (layers
  `j .. t-1` all recomputed, its block at step t or above: `Z_t`, at most
  the forward time of that run), and inside `B_t` that run holds its
  regenerated internals, at least `hang_slope[t]` per unit of `Z_t` (the
  least internals per forward time over the runs below t). Without it the
  LP hid the whole recomputation before `B_{L-1}` to give D2H time while
  holding none of what it regenerates (GPT-2's traced block x48 with menus:
  5.68/13.22/21.34% over T_ideal at 70/50/30%, 6.57/14.69/22.81% with it).

Over menus (cost model v3, 12.2-12.4) each option of a layer is one more
action (kept or swapped with that option), as in the exact MIP: kept, it
holds its `h_k` (plus the output when read) below later layers and `h_k`
inside the next layer's forward; swapped, it copies that much each way; and
its regeneration `R_i` adds `r_k` to the compute stream before `B_i` (so to
every suffix sum of recomputation). Inside `B_i` a partial layer holds all
its internals (what the row already counts) and its input `x_i`, added where
no other term counts it. The regeneration's scratch is left out (a plan only
holds more).

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

import pulp

from planopt.profile import Profile
from planopt.work import WorkMeter
from solvers.backends.highs import solve_with_highs
from solvers.model.relaxation_coefficients import coefficients, window_starts
from solvers.model.relaxation_highs import highs_bound
from solvers.model.units import horizon_seconds

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

    Solved by HiGHS directly (`solvers.model.relaxation_highs`, which says
    how the work is spent and charged to `meter`); `relax=True` stops at the
    LP. `threads` is accepted for the reference's signature; the bound runs
    on one thread.
    """
    bound, _ = highs_bound(
        profile, budget, time_limit=time_limit, work_limit=work_limit, mip=not relax, meter=meter
    )
    return bound


def pulp_relaxation_bound(
    profile: Profile,
    budget: float,
    *,
    time_limit: float | None = None,
    work_limit: float | None = None,
    relax: bool = False,
    threads: int = 1,
    meter: WorkMeter | None = None,
) -> float | None:
    """The same bound built in PuLP: the reference the HiGHS builder is tested against.

    `meter`, when given, is charged the work: building (`BUILD_UNITS_PER_LAYER`)
    and solving.
    """
    if not horizon_seconds(profile) > 0:  # nothing takes time: the bound is T_ideal itself
        return profile.t_ideal
    c = coefficients(profile)
    n = c.n
    f, b, s, out, internals = c.f, c.b, c.s, c.out, c.internals
    d_out, d_in, f_end, b_upto = c.d_out, c.d_in, c.f_end, c.b_upto
    cap = c.capacity(budget)
    forward_total = c.forward_total

    cat = pulp.LpContinuous if relax else pulp.LpBinary
    prob = pulp.LpProblem("planopt_bound", pulp.LpMinimize)
    keep = [pulp.LpVariable(f"k{i}", 0, 1, cat) for i in range(n)]
    swap = [pulp.LpVariable(f"w{i}", 0, 1, cat) for i in range(n)]
    rec = [pulp.LpVariable(f"r{i}", 0, 1, cat) for i in range(n)]
    # v3: per option of layer i's menu, kept (`keep_opt`) or swapped (`swap_opt`) with it.
    menus = c.options or ((),) * n
    keep_opt = [_option_vars("ko", i, menu, cat) for i, menu in enumerate(menus)]
    swap_opt = [_option_vars("wo", i, menu, cat) for i, menu in enumerate(menus)]

    def kept_as(i: int, whole: float, attr: str):
        """What layer i's keep variables hold: `whole` kept whole, each option's `attr`."""
        terms = [(getattr(o, attr), v) for o, v in zip(menus[i], keep_opt[i], strict=True)]
        return whole * keep[i] + pulp.lpSum(a * v for a, v in terms)

    def swapped_as(i: int, whole: float, attr: str):
        """`whole` swapped whole, each option's `attr` (copied bytes or copy time) swapped."""
        terms = [(getattr(o, attr), v) for o, v in zip(menus[i], swap_opt[i], strict=True)]
        return whole * swap[i] + pulp.lpSum(a * v for a, v in terms)

    def partial(i: int):
        return pulp.lpSum(keep_opt[i]) + pulp.lpSum(swap_opt[i])

    def regenerated(i: int):
        """Compute time layer i adds before B_i: its recomputation or its option's R_i."""
        options = zip(menus[i], keep_opt[i], swap_opt[i], strict=True)
        return f[i] * rec[i] + pulp.lpSum(o.recompute * (k + w) for o, k, w in options)

    makespan = pulp.LpVariable("T", lowBound=c.t_ideal)
    prob += makespan
    for i in range(n):
        prob += keep[i] + swap[i] + rec[i] + partial(i) == 1
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
        if t > 0:
            prob += stall[t] >= stall[t - 1]
        if t < n - 1:
            prob += extra[t] >= extra[t + 1]
        prob += rec_from[t] == rec_from[t + 1] + regenerated(t)
        prob += extra[t] >= rec_from[t]
    # What runs after B_t starts (`extra[0] - extra[t]`) holds every regeneration
    # below t but the recompute run hanging below t (`hang[t]`: layers j .. t-1 all
    # recomputed, whose block may run at step t or above).
    # Inside B_t that run holds its regenerated internals, at least `hang_slope[t]`
    # per unit of its time (the memory rows below). Left out on long nets.
    slopes = c.hang_slope
    hang = [0, *(pulp.LpVariable(f"Z{t}", lowBound=0) for t in range(1, n))] if slopes else []
    for t in range(1, len(hang)):
        prob += hang[t] <= hang[t - 1] + f[t - 1] * rec[t - 1]
        prob += hang[t] <= c.f_end[t - 1] * rec[t - 1]
        prob += extra[0] - extra[t] >= rec_from[0] - rec_from[t] - hang[t]
    prob += makespan >= forward_end + math.fsum(b) + extra[0]

    # Suffix sums of copy-back time (H2D) and copy-out time (D2H).
    back_from = [pulp.LpVariable(f"H{t}", lowBound=0) for t in range(n + 1)]
    out_from = [pulp.LpVariable(f"D{t}", lowBound=0) for t in range(n + 1)]
    prob += back_from[n] == 0
    prob += out_from[n] == 0
    for t in range(n - 1, -1, -1):
        prob += back_from[t] == back_from[t + 1] + swapped_as(t, d_in[t], "d_in")
        prob += out_from[t] == out_from[t + 1] + swapped_as(t, d_out[t], "d_out")
        # Copies back of layers >= t run after the forward pass, before B_t.
        prob += extra[t] >= back_from[t] - (b_upto[n - 1] - b_upto[t])
        prob += makespan >= (f_end[t - 1] if t else 0.0) + stall[t] + out_from[t]
        copies = swapped_as(t, d_out[t], "d_out") + swapped_as(t, d_in[t], "d_in")
        prob += makespan >= f_end[t] + stall[t] + copies + b_upto[t]

    # Kept bytes below each layer, then the memory checks.
    kept_below = [pulp.LpVariable(f"K{i}", lowBound=0) for i in range(n + 1)]
    prob += kept_below[0] == 0
    for i in range(n):
        prob += kept_below[i + 1] == kept_below[i] + kept_as(i, s[i], "s")
    # Swapped bytes below each layer, and what the copy engines move per time unit.
    swapped_below = [pulp.LpVariable(f"S{i}", lowBound=0) for i in range(n + 1)]
    prob += swapped_below[0] == 0
    for i in range(n):
        prob += swapped_below[i + 1] == swapped_below[i] + swapped_as(i, s[i], "s")
    out_rate, in_rate = c.out_rate, c.in_rate
    for i in range(n):
        # Inside F_i: its input x_i (any action frees it no earlier than F_i's end),
        # its internals and output, its scratch, the kept products below i-1 and
        # the internals of i-1 when kept.
        fixed = c.fwd_fixed[i]
        if c.has_fwd[i] and i == 0:
            # F_0's check has no decision in it: a constant, which PuLP refuses
            # as a constraint (and compares without tolerance).
            if fixed > cap * (1 + 1e-12) + 1e-12:
                return None
        elif c.has_fwd[i]:
            held = _still_held(
                prob, f"R{i}", swapped_below, i - 1, out_rate, _fwd_gap(f_end, stall, i)
            )
            below = kept_below[i - 1] + kept_as(i - 1, internals[i - 1], "internals")
            prob += below + held + out[i - 1] + fixed <= cap
        # Inside B_i: the kept products below i (the output of i-1 once, when B_i
        # reads it), and `backward_fixed`.
        if c.has_bwd[i]:
            held = _still_held(prob, f"Q{i}", swapped_below, i, in_rate, _bwd_gap(b_upto, extra, i))
            below = kept_below[i]
            if c.counts_input_once[i]:
                # x_i is counted once, in what B_i reads, whether kept or copied back
                stays = keep[i - 1] + swap[i - 1] + partial(i - 1)
                below = below - out[i - 1] * stays
            if c.partial_input and c.partial_input[i]:
                below = below + c.partial_input[i] * partial(i)  # a partial B_i reads x_i
            if slopes and i > 0 and slopes[i] > 0:
                below = below + slopes[i] * hang[i]  # the hanging run's regenerated internals
            out_gap = _out_gap(f_end, stall, b_upto, extra, i)
            not_out = _still_held(prob, f"O{i}", swapped_below, i, out_rate, out_gap)
            prob += below + held + not_out + c.backward_fixed[i] <= cap

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
    return max(profile.t_ideal, c.seconds(bound) * (1 - 1e-7))


def _option_vars(prefix: str, i: int, menu, cat) -> list:
    return [pulp.LpVariable(f"{prefix}{i}_{k}", 0, 1, cat) for k in range(len(menu))]


def _still_held(prob, name: str, swapped_below, top: int, rate: float, gap) -> object:
    """A variable at most the swapped bytes of layers below `top` still on the device,
    given that the copy engine moves `rate` per time unit over `gap(k)`."""
    if top <= 0 or not math.isfinite(rate):
        return 0
    held = pulp.LpVariable(name, lowBound=0)
    for k in window_starts(top, len(swapped_below) - 1):
        prob += held >= swapped_below[top] - swapped_below[k] - rate * gap(k)
    return held


def _fwd_gap(f_end, stall, i: int):
    """Time from the end of F_k to the start of F_i."""
    return lambda k: (f_end[i - 1] - f_end[k]) + stall[i] - stall[k]


def _out_gap(f_end, stall, b_upto, extra, t: int):
    """Time from the end of F_k to the start of B_t."""
    n = len(f_end)
    return lambda k: (
        (f_end[n - 1] - f_end[k]) + stall[n - 1] - stall[k] + (b_upto[n - 1] - b_upto[t]) + extra[t]
    )


def _bwd_gap(b_upto, extra, t: int):
    """Time from the start of B_t to the start of B_k (k < t)."""
    return lambda k: (b_upto[t] - b_upto[k]) + extra[k] - extra[t]
