"""Batched scoring for the greedy's inner loop: one pass, many "free copy" probes.

PoocH's stage 2 asks, for every swapped tensor `c`, what the makespan would be
if the copies of `c` took no time (`Scorer.score(..., free_copies={c})`).
Every probe runs the same operations in the same order on the same queues;
only two durations differ. So we run the simulator's recurrence once with a
vector of candidates in place of each scalar time. The float operations and
their order are exactly those of `planopt.simulate.Scorer.timing`, so each
entry equals the scalar probe bit for bit (the tests check this).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from planopt.plan import SWAP, Action
from planopt.simulate import STOP_EVERY, Scorer, SimulationStopped


def free_copy_makespans(
    scorer: Scorer,
    actions: Sequence[Action],
    prefetch_at: Sequence[int | None],
    swap_wait: Sequence[int | None],
    candidates: Sequence[int],
    *,
    stop: Callable[[], bool] | None = None,
) -> tuple[float, np.ndarray]:
    """The plan's makespan, and its makespan with the copies of `candidates[k]`
    free for every k (float64 array).

    Candidates must be swap layers of the (valid) plan. Cost: one simulation
    with numpy vectors of length `len(candidates) + 1` (the last column frees
    nothing), i.e. O(L) numpy calls. `stop` is asked as in the simulator
    (every `STOP_EVERY` layers, never at the start), which raises
    `SimulationStopped` when it says yes.
    """
    n = scorer.n
    m = len(candidates) + 1
    pos = {c: k for k, c in enumerate(candidates)}
    fwd, bwd = scorer.fwd, scorer.bwd
    runs = scorer.runs(actions)
    out_dur, back_dur = scorer.copy_durations(actions, runs)

    waiters: dict[int, list[int]] = {}
    prefetches: dict[int, list[int]] = {}
    for i in range(n):
        if actions[i] is SWAP:
            prefetches.setdefault(prefetch_at[i], []).append(i)
            w = swap_wait[i]
            if w is not None:
                waiters.setdefault(w, []).append(i)

    # `clock` stays a Python float while it is the same for every candidate
    # (no swap_wait yet), then becomes a vector; both add like the scalar code.
    clock: float | np.ndarray = 0.0
    d2h_free = np.zeros(m)
    out_end: dict[int, np.ndarray] = {}
    for i in range(n):
        if i and i % STOP_EVERY == 0 and stop is not None and stop():
            raise SimulationStopped
        if i in waiters:
            for w in waiters[i]:
                clock = np.maximum(clock, out_end[w])
        clock = clock + fwd[i]
        if actions[i] is SWAP:
            start = np.maximum(clock, d2h_free)
            end = start + out_dur[i]
            k = pos.get(i)
            if k is not None:
                end[k] = start[k]  # start + 0.0: the free copy
            out_end[i] = d2h_free = end

    h2d_free = np.zeros(m)
    back_end: dict[int, np.ndarray] = {}
    for t in range(n - 1, -1, -1):
        if t + 1 < n and (n - 1 - t) % STOP_EVERY == 0 and stop is not None and stop():
            raise SimulationStopped
        if t in prefetches:
            for i in sorted(prefetches[t], reverse=True):
                start = np.maximum(np.maximum(clock, h2d_free), out_end[i])
                end = start + back_dur[i]
                k = pos.get(i)
                if k is not None:
                    end[k] = start[k]
                back_end[i] = h2d_free = end
        if t in runs.block_at:
            first, top = runs.block_at[t]
            k = first - 1
            if k >= 0 and actions[k] is SWAP:
                clock = np.maximum(clock, back_end[k])
            for j in range(first, top + 1):
                clock = clock + fwd[j]
        for i in scorer.reads_back(t, actions):
            clock = np.maximum(clock, back_end[i])
        clock = clock + bwd[t]
    makespan = np.maximum(np.maximum(clock, d2h_free), h2d_free)
    return float(makespan[-1]), makespan[:-1]
