"""Exact windows: a window of layers re-optimised by CP-SAT on the whole-chain model.

The actions, prefetch steps and waits of the window's layers are free;
every other layer is pinned to the incumbent's decisions
(`solvers.model.Choices`, which collapses their copy-back queue slots: the
model grows with L, not L^2). The window's optimum is exact up to the
model's time rounding; a window can also be copied to other copies of a
repeated block (`Window.shifts`), then it is a candidate like any other.
Windows that find nothing double in size for the next pass, up to the
whole chain (so on small nets the search ends in an exact solve).

NOTE (what we tried and dropped): a window model on a *reduced* chain (the
window, a few fixed neighbours, everything else collapsed into a few `keep`
layers with the incumbent's spans and memory) builds in milliseconds, but
it cannot see the collapsed layers' copies: on GPT-48 at 30% every one of
14 windows it proposed was slower in the simulator. The whole-chain model
costs about 2 s a window at 628 layers (0.5 s building, 1 s translating to
CP-SAT, 0.5 s solving); it is exact but, after the group search, rarely
finds more on nets of hundreds of layers, so it runs last.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from planopt.plan import KEEP, RECOMPUTE, SWAP, need_indices
from planopt.work import SIMULATION_UNITS_PER_LAYER
from solvers.search.driver import Phase
from solvers.search.engine import Change, Incumbent

# An exact window's swaps may wait for their copy out at any of this many
# forwards after their own (a window over the whole chain: any forward).
WINDOW_WAITS = 3
# Building the window's model and handing it to CP-SAT costs about this many
# work units per layer of the chain (0.5 s + 1 s at 628 layers, measured),
# charged on top of CP-SAT's own deterministic time.
BUILD_UNITS_PER_LAYER = 2.5e-3
# A window with less work than this left is not started.
MIN_WINDOW_WORK = 0.05


@dataclass(frozen=True)
class Window:
    """Layers `lo .. hi-1` to re-optimise exactly; the moves found are also made
    at each offset in `shifts` (other copies of a repeated block). `shifts ==
    (0,)` means the window alone: then the model's plan is taken as it is."""

    lo: int
    hi: int
    shifts: tuple[int, ...] = (0,)


def sliding_windows(n: int, size: int) -> list[Window]:
    """Windows of `size` layers from the top of the chain down, overlapping by half."""
    if n <= size:
        return [Window(0, n)]
    stride = max(1, size // 2)
    starts = list(range(n - size, -1, -stride))
    if starts[-1] != 0:
        starts.append(0)
    return [Window(s, s + size) for s in starts]


def exact_window(
    inc: Incumbent,
    window: Window,
    *,
    work: float,
    reach: int = 16,
    waits: int = WINDOW_WAITS,
) -> bool:
    """Re-optimise `window` with the exact whole-chain model; True when the incumbent improved.

    A window layer may prefetch at any step up to `reach` above the window (or
    where it prefetches now) and wait for its copy out at any of the next
    `waits` forwards; every other layer keeps the incumbent's decisions.
    CP-SAT gets `work` units of deterministic time, single-threaded and
    seeded with the problem's seed, so the window's answer is the same on
    any machine (unless the wall-clock limit cuts it).
    """
    from solvers.backends.cpsat import solve as solve_cpsat
    from solvers.model import Choices, Expr, Linear, build

    problem = inc.problem
    n, lo, hi = inc.n, window.lo, window.hi
    choices: dict[int, Choices] = {}
    for i in range(n):
        a = inc.actions[i]
        if lo <= i < hi:
            steps = set(range(i, min(n, hi + reach)))
            wsteps = set(range(i + 1, min(n, i + 1 + waits)))
            if a is SWAP:
                steps.add(inc.prefetch[i])
                if inc.wait[i] is not None:
                    wsteps.add(inc.wait[i])
            choices[i] = Choices(
                (KEEP, SWAP, RECOMPUTE), tuple(sorted(steps)), tuple(sorted(wsteps))
            )
        elif a is SWAP:
            w = inc.wait[i]
            choices[i] = Choices(
                (SWAP,), (inc.prefetch[i],), () if w is None else (w,), (inc.options[i],)
            )
        else:
            choices[i] = Choices((a,), options=(inc.options[i],))
    problem.meter.charge(BUILD_UNITS_PER_LAYER * n)
    form = build(problem.profile, problem.budget, choices=choices)
    for i in range(n):
        w = inc.wait[i]
        if not lo <= i < hi and inc.actions[i] is SWAP and w is not None:
            form.model.add(Linear(Expr(((form.wait[i][w], 1),)), 1, 1))  # pin the wait
    hint = [0] * len(form.model.vars)  # CP-SAT is hinted the decisions only
    for v, val in form.decisions(inc.plan()).items():
        hint[v] = val
    result = solve_cpsat(
        form,
        time_limit=problem.time_left(),
        work_limit=work,
        threads=1,
        seed=problem.seed,
        hint=hint,
    )
    problem.meter.charge(min(work, result.work_used))
    inc.windows += 1
    if result.values is None:
        return False
    plan = form.decode(lambda v: result.values[v])
    if all(
        plan.actions[i] is inc.actions[i]
        and plan.prefetch_at[i] == inc.prefetch[i]
        and plan.swap_wait[i] == inc.wait[i]
        and (plan.options or (None,) * n)[i] == inc.options[i]
        for i in range(lo, hi)
    ):
        return False
    if window.shifts == (0,):
        return inc.offer(plan)
    need = need_indices(plan.actions, problem.profile, plan.options)
    changes: list[Change] = []
    for shift in window.shifts:
        for i in range(lo, hi):
            a = plan.actions[i]
            if a is SWAP:
                w = plan.swap_wait[i]
                lead, off = plan.prefetch_at[i] - need[i], None if w is None else w - i
                changes.append((i + shift, SWAP, lead, off))
            else:
                changes.append((i + shift, a, None, None))
    return inc.take_best([changes])


def window_phase(
    windows: Callable[[int], Sequence[Window]], size: int, n: int, window_work: float
) -> Phase:
    """Exact windows of `size` layers (`windows(size)`), each given at most
    `window_work` units; when a whole pass improves nothing, the size doubles
    for the next pass (up to the whole chain), so a net of a few dozen layers
    ends in windows that hold all of it."""
    sizes = [size]
    while sizes[-1] < n:
        sizes.append(min(n, 2 * sizes[-1]))

    def run(inc: Incumbent) -> bool:
        for current in sizes:
            improved = False
            for window in windows(current):
                if inc.out_of_work():
                    return improved
                left = inc.problem.work_left()
                work = window_work if left is None else min(window_work, left)
                if work <= MIN_WINDOW_WORK + SIMULATION_UNITS_PER_LAYER * n:
                    return improved
                # A window over the whole chain is the whole plan space: any wait.
                waits = n if current >= n else WINDOW_WAITS
                improved |= exact_window(inc, window, work=work, waits=waits)
            if improved:
                return True
        return False

    return ("exact windows", run)
