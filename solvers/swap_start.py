"""A cheap keep/swap start: from keep-all, swap the layer whose copies cost the least
time for the memory they free, until the budget holds; then PoocH's prefetch timing.

NOTE (why). The keep/swap space (`swap-only`) had no good start of its own:
the greedy's plan recomputes as soon as recomputing pays, so it is not a
keep/swap plan, and all-swap or the minimum-memory plan leave every copy
exposed. Once the roofline profiles' forward times were corrected (commit
6d65dcf), a copy out no longer hid behind the forward, CP-SAT's 3 units
never left all-swap's neighbourhood, and `swap-only` answered 290% over
T_ideal on the roofline VGG-16 at 90% where one swapped layer gives 7%.

The rule: each round tries every kept layer but the last (its backward runs
right after its forward: a swap frees nothing) as a swap with its copy back
issued just in time, 1, 2, 4, ... steps ahead or at the start of the backward
(a copy back issued too early holds its memory through the backward's peak,
one issued too late is exposed), and the forward waiting
for its copy out at the next layer, at the last one or not at all; it takes
the try with the least makespan added per byte of peak removed (ties: lower
layer, then the order above), until the plan fits. PoocH's stage 3
(`solvers.pooch`) then removes the waits the budget does not need, moves the
rest as late as it allows, and times each copy back. Every try is one
simulation charged to the problem's work meter, with a simulation call's
fixed cost (`planopt.work.SIMULATION_CALL_UNITS`: on the 24-30-layer chains
`swap-only` is calibrated on, the tries cost three times their layers); on
expiry the start gives nothing (the other starts remain).
"""

from __future__ import annotations

from planopt.plan import KEEP, SWAP, Plan, need_indices
from planopt.problem import Problem
from planopt.work import SIMULATION_CALL_UNITS
from solvers.pooch import _Expired, _Greedy, _Work


def swap_start(problem: Problem) -> Plan | None:
    """The keep/swap plan of the module's rule, or None when none was found in time."""
    n = problem.n
    greedy = _Greedy(problem)
    w = _Work([KEEP] * n, [None] * n, [None] * n)
    try:
        makespan, peak = greedy.score(w)
        while not problem.fits(peak):
            best = None
            for i in range(n - 1):
                if w.actions[i] is not KEEP:
                    continue
                for tried in _tries(w, i, n, problem):
                    greedy.tick()
                    problem.meter.charge(SIMULATION_CALL_UNITS)
                    t, p = greedy.score(tried)
                    if p >= peak:
                        continue
                    rate = (t - makespan) / (peak - p)
                    if best is None or rate < best[0]:
                        best = (rate, tried, t, p)
            if best is None:
                return None  # no swap lowers the peak
            _, w, makespan, peak = best
        greedy.found = True
        greedy.stage3(w)
    except _Expired:
        if not greedy.found:
            return None
    return Plan.build(w.actions, w.prefetch, w.wait, profile=problem.profile)


def _tries(w: _Work, i: int, n: int, problem: Problem) -> list[_Work]:
    """Layer `i` swapped, with each copy-back step and forward wait of the rule."""
    actions = list(w.actions)
    actions[i] = SWAP
    need = need_indices(actions, problem.profile)
    tries = []
    steps, gap = [need[i]], 1
    while need[i] + gap < n - 1:
        steps.append(need[i] + gap)
        gap *= 2
    for prefetch in dict.fromkeys((*steps, n - 1)):
        for wait in dict.fromkeys((i + 1, n - 1, None)):
            # The other swaps keep their steps: swapping `i` moves no one's need.
            pf, wt = list(w.prefetch), list(w.wait)
            pf[i] = prefetch
            wt[i] = wait
            tries.append(_Work(list(actions), pf, wt))
    return tries
