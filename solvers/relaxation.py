"""A cheap lower bound on the optimal makespan, for nets of any size.

It relaxes the spec to a small mixed-integer program over the actions alone
(no prefetch or wait choices, no exact schedule), keeping only facts every
plan must obey:

* the compute stream runs every forward, backward and recomputation;
* all copies back run one at a time on H2D, none before the forward pass
  ends, and every copy back of a layer >= t ends before `B_t` starts;
* a swapped layer's copy out (after `F_i`) and copy back precede `B_i`,
  and D2H runs the copies out one at a time;
* memory: strictly inside `F_i` (positive duration) every kept tensor below
  `i - 1` is alive besides `s_{i-1}`, `s_i` and the forward scratch; inside
  `B_t` every kept tensor below `t` is alive besides `s_t` and its scratch.

Any plan's actions satisfy all of these, so the program's optimum (or the
MIP solver's proven bound under a time limit, or the LP bound when
`relax=True`) is at most the true optimum.
"""

from __future__ import annotations

import math

import pulp

from planopt.profile import Profile
from solvers.highs import solve_with_highs


def relaxation_bound(
    profile: Profile,
    budget: float,
    *,
    time_limit: float | None = None,
    relax: bool = False,
    threads: int = 1,
) -> float | None:
    """A proven lower bound in seconds, or None if even the relaxation cannot fit `budget`."""
    layers = profile.layers
    n = len(layers)
    dev = profile.device
    # NOTE: rows mix bytes (~1e9) and seconds (~1e-3); unscaled, HiGHS's
    # absolute tolerances returned "optima" above a feasible plan's makespan.
    # Time is in units of T_ideal and memory in units of the largest tensor.
    copies = [dev.d2h_seconds(x.saved_bytes) + dev.h2d_seconds(x.saved_bytes) for x in layers]
    t_unit = max(profile.t_ideal, *copies)
    if not t_unit > 1e-200:  # nothing takes time: the bound is T_ideal itself
        return profile.t_ideal
    m_unit = float(max([1, *(layer.saved_bytes for layer in layers)]))
    cap = (budget - profile.static_bytes) / m_unit
    f = [layer.fwd / t_unit for layer in layers]
    b = [layer.bwd / t_unit for layer in layers]
    s = [layer.saved_bytes / m_unit for layer in layers]
    d_out = [dev.d2h_seconds(layer.saved_bytes) / t_unit for layer in layers]
    d_in = [dev.h2d_seconds(layer.saved_bytes) / t_unit for layer in layers]
    forward_total = math.fsum(f)
    f_end = [math.fsum(f[: i + 1]) for i in range(n)]
    b_upto = [math.fsum(b[: i + 1]) for i in range(n)]

    cat = pulp.LpContinuous if relax else pulp.LpBinary
    prob = pulp.LpProblem("planopt_bound", pulp.LpMinimize)
    keep = [pulp.LpVariable(f"k{i}", 0, 1, cat) for i in range(n)]
    swap = [pulp.LpVariable(f"w{i}", 0, 1, cat) for i in range(n)]
    rec = [pulp.LpVariable(f"r{i}", 0, 1, cat) for i in range(n)]
    makespan = pulp.LpVariable("T", lowBound=profile.t_ideal / t_unit)
    prob += makespan
    for i in range(n):
        prob += keep[i] + swap[i] + rec[i] == 1
    prob += makespan >= forward_total + math.fsum(b) + pulp.lpSum(f[i] * rec[i] for i in range(n))

    # Suffix sums of copy-back time (H2D) and copy-out time (D2H).
    back_from = [pulp.LpVariable(f"H{t}", lowBound=0) for t in range(n + 1)]
    out_from = [pulp.LpVariable(f"D{t}", lowBound=0) for t in range(n + 1)]
    prob += back_from[n] == 0
    prob += out_from[n] == 0
    for t in range(n - 1, -1, -1):
        prob += back_from[t] == back_from[t + 1] + d_in[t] * swap[t]
        prob += out_from[t] == out_from[t + 1] + d_out[t] * swap[t]
        prob += makespan >= forward_total + back_from[t] + b_upto[t]
        prob += makespan >= (f_end[t - 1] if t else 0.0) + out_from[t]
        prob += makespan >= f_end[t] + (d_out[t] + d_in[t]) * swap[t] + b_upto[t]

    # Kept bytes below each layer, then the memory checks.
    kept_below = [pulp.LpVariable(f"K{i}", lowBound=0) for i in range(n + 1)]
    prob += kept_below[0] == 0
    for i in range(n):
        prob += kept_below[i + 1] == kept_below[i] + s[i] * keep[i]
    for i, layer in enumerate(layers):
        if layer.fwd > 0:
            prev = s[i - 1] if i else 0
            below = kept_below[i - 1] if i else 0
            prob += below + prev + s[i] + layer.fwd_work_bytes / m_unit <= cap
        if layer.bwd > 0:
            prob += kept_below[i] + s[i] + layer.bwd_work_bytes / m_unit <= cap

    solve_with_highs(prob, timeLimit=time_limit, threads=threads)
    status = pulp.LpStatus[prob.status]
    if status == "Infeasible":
        return None
    if relax:
        bound = pulp.value(prob.objective) if status == "Optimal" else None
    else:
        # NOTE: "optimal" for a MIP means within HiGHS's relative gap, so the
        # proven dual bound is used, not the incumbent's objective.
        bound = prob.solverModel.getInfo().mip_dual_bound
        if bound is None or not math.isfinite(bound):
            bound = None
    if bound is None:
        return profile.t_ideal
    return max(profile.t_ideal, bound * t_unit * (1 - 1e-7))
