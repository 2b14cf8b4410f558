"""PoocH's stage 5 (ours, cost model v3): a cheaper option before a whole layer's swap or recompute.

The rule. After stages 1-3, on a profile with menus, each layer that the
greedy left swapped or recomputed whole and that has a menu is visited
from the top of the chain down (the latest forward first, as stage 1
gives memory back). Its options are tried in order of increasing
regeneration time `r_k` (ties: the one keeping more, `h_k`, then menu
order), each as `keep` with that option; the first change that fits the
budget and makes the makespan strictly smaller is taken, and the next layer
is visited. A change that raises the need of a swapped layer below it (a layer
with an option reads its input) moves that layer's copy back to its new
need. Every candidate is one simulation; the plan always fits the budget.

NOTE (no swap with an option): cost model v3 defines a swap of an option's
kept subset, but no runtime runs it (torch 2.13's SAC offloads a cached
tensor, `CheckpointPolicy.MUST_CPU_OFFLOAD`, only under torch.compile: in
eager it recomputes it), so the chain executor and `apply` refuse it; stage
5 tries only `keep` with an option, so pooch's plans always run.
"""

from __future__ import annotations

from typing import Any

from planopt.plan import KEEP, RECOMPUTE, SWAP, need_indices

# The greedy and its working plan are pooch's (`_Greedy`, `_Work`); typed as Any
# so this module never imports pooch, which imports it.


def take_options(greedy: Any, w: Any) -> None:
    """Stage 5 on the working plan `w` (nothing to do without menus)."""
    profile = greedy.problem.profile
    if not profile.has_options:
        return
    n = greedy.n
    if w.options is None:
        w.options = [None] * n
    makespan, _ = greedy.score(w)
    for i in range(n - 1, -1, -1):
        layer = profile.layers[i]
        if not layer.options or w.actions[i] is KEEP or w.options[i] is not None:
            continue
        menu = sorted(layer.options, key=lambda o: (o.recompute, -o.saved_bytes))
        for action, name in [(KEEP, o.name) for o in menu]:  # never swap + option (NOTE)
            greedy.tick()
            undo = _set(w, i, action, name, profile)
            better = False
            try:
                t, peak = greedy.score(w)
                better = greedy.problem.fits(peak) and t < makespan
            finally:
                if not better:
                    undo()
            if better:
                makespan = t
                greedy.log.options += 1
                break


def _set(w: Any, i: int, action, name: str, profile):
    """Give layer `i` the action and option; fix copies back below; return the undo."""
    saved = (list(w.actions), list(w.prefetch), list(w.wait), list(w.options))
    n = len(w.actions)
    was_swap = w.actions[i] is SWAP
    w.actions[i] = action
    w.options[i] = name
    if action is not SWAP:
        w.prefetch[i], w.wait[i] = None, None
    elif not was_swap:
        w.prefetch[i] = n - 1
    need = need_indices(w.actions, profile, w.options)
    for j in range(n):
        if w.actions[j] is SWAP and w.prefetch[j] < need[j]:
            w.prefetch[j] = need[j]
        if w.actions[j] is RECOMPUTE:
            w.prefetch[j], w.wait[j] = None, None

    def undo() -> None:
        w.actions[:], w.prefetch[:], w.wait[:], w.options[:] = saved

    return undo
