"""Budgets: the minimum any plan needs, fractions of keep-all, and parsing.

NOTE (the minimum budget, spec v2): strictly inside a forward `F_i` of
positive duration every plan holds `x_i` (layer `i-1`'s output: every action
frees it no earlier than the end of `F_i`), layer `i`'s internals and output
(allocated at the start of `F_i`) and the forward scratch; strictly inside a
backward `B_i` of positive duration it holds what `B_i` reads (its
internals, its output if `saves_output`, its input if `saves_input`), the
gradients `g_i` (written by `B_i`) and `g_{i+1}` (freed at the end of
`B_i`), every parameter gradient allocated since `B_{L-1}` and the
backward scratch. So every plan peaks at no less than

    static + max( max_{i: fwd_i > 0} o_{i-1} + s_i + o_i + fwd_work_i,
                  max_{i: bwd_i > 0} read_i + g_i + g_{i+1} + sum_{j >= i} pg_j + bwd_work_i )

`min_memory_plan` (every layer swapped, each forward waiting for the
previous copy out with `swap_wait = i + 1`, each copy back issued at the
step that needs it) peaks at exactly that when every time is positive and
a swap's one copy back holds nothing its first reader does not read (always
under version 1, whose bound this is too). Otherwise the witness can exceed
the bound; `min_budget_info` then says the value is a proven lower bound,
not exact. The tests check both halves against brute force.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from planopt.budget_grammar import (
    MAX_BUDGET_BYTES,
    number_bytes,
    of_keep_all,
    parse_budget_fraction,
    parse_budget_text,
)
from planopt.bundled import resolve_profile
from planopt.errors import BudgetError, show
from planopt.plan import KEEP, SWAP, Plan, need_indices
from planopt.profile import Profile
from planopt.runnable import repair
from planopt.simulate import Scorer, keep_all_peak

# The grammar's names, read here by older callers (`planopt.budget_grammar` has them).
__all__ = [
    "MAX_BUDGET_BYTES",
    "SpaceMinimum",
    "budget_from_fraction",
    "keep_all_peak",
    "memory_lower_bound",
    "min_budget",
    "min_budget_info",
    "min_memory_plan",
    "number_bytes",
    "parse_budget",
    "parse_budget_fraction",
    "space_min_budget",
]


def memory_lower_bound(profile: Profile | str) -> int:
    """The bound of the module note: no plan peaks below it."""
    profile = resolve_profile(profile)
    layers = profile.layers
    n = len(layers)
    best = 0
    param_grads = 0  # sum of pg_j for j >= i
    for i in range(n - 1, -1, -1):
        layer = layers[i]
        param_grads += layer.param_grad_bytes
        below = layers[i - 1].out_bytes if i > 0 else 0
        if layer.fwd > 0:
            best = max(best, below + layer.saved_bytes + layer.out_bytes + layer.fwd_work_bytes)
        if layer.bwd > 0:
            read = (
                (layer.saved_bytes if layer.saved_bytes > 0 else 0)
                + (layer.out_bytes if layer.saves_output else 0)
                + (below if layer.saves_input else 0)
            )
            grads = layer.input_grad_bytes + (layers[i + 1].input_grad_bytes if i + 1 < n else 0)
            best = max(best, read + grads + param_grads + layer.bwd_work_bytes)
    return profile.static_bytes + best


def min_budget_info(profile: Profile | str) -> tuple[int, bool]:
    """`(value, exact)`: the minimum budget, and whether it is exact or a lower bound."""
    profile = resolve_profile(profile)
    bound = memory_lower_bound(profile)
    witness = Scorer(profile).score_plan(min_memory_plan(profile))[1]
    return (bound, True) if witness == bound else (bound, False)


def min_budget(profile: Profile | str) -> int:
    """The smallest budget any plan can meet.

    Exact whenever every layer has positive forward and backward times (and
    whenever `min_budget_info` says so); otherwise a proven lower bound.
    The value is the bound of the module note: `min_budget_info`'s witness
    only says whether it is exact (at 10^5 layers simulating it took 2 s of
    every solve's time limit), so it is not built here.
    """
    return memory_lower_bound(profile)


def min_memory_plan(profile: Profile | str) -> Plan:
    """A plan whose peak is exactly `min_budget(profile)` (the bound's witness).

    Where layers change their input in place, all-swap may break the in-place
    rule: the witness keeps layers until it runs (`planopt.runnable.repair`),
    and its peak may then exceed the bound (`min_budget_info` says so).
    """
    profile = resolve_profile(profile)
    n = len(profile.layers)
    actions = [SWAP] * n
    if n:
        actions[-1] = KEEP  # nothing above it to wait; keeping it costs the same bytes
    need = need_indices(actions, profile)
    prefetch = [need[i] if i < n - 1 else None for i in range(n)]
    wait = [i + 1 if i < n - 1 else None for i in range(n)]
    actions, prefetch, wait, _ = repair(profile, actions, prefetch, wait)
    return Plan.build(actions, prefetch, wait, profile=profile)


def budget_from_fraction(profile: Profile | str, fraction: float) -> int:
    """`floor(static + r * (peak_keep_all - static))` in whole bytes (spec: "Figures
    every report uses"), exact for the float `fraction` given, which is at most 1
    (keep-all: see `planopt.budget_grammar`)."""
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, int | float)
        or fraction != fraction
        or fraction < 0
        or fraction == math.inf
    ):
        raise BudgetError(f"budget fraction must be a finite number >= 0, got {show(fraction)}")
    if fraction > 1:
        raise BudgetError(
            f"budget fraction must be at most 1, got {show(fraction)}: that is above keep-all "
            f"(1 is keep-all, every layer kept, the peak no plan needs to exceed); a budget "
            f"beyond it is given in bytes"
        )
    profile = resolve_profile(profile)
    return of_keep_all(
        profile.static_bytes, keep_all_peak(profile), Fraction(fraction), show(fraction)
    )


def parse_budget(text: str | int | float, profile: Profile | str) -> int:
    """Whole bytes from `12884901888`, `12GiB`, `1.5GB` or `50%` (of keep-all activations).

    The one budget grammar of the API and the command line
    (`planopt.budget_grammar`, whose NOTE says the rules): a byte count is
    whole, a size or a percentage is rounded down to whole bytes, a bare
    number below 1 is refused with the percentage it likely meant, and a
    percentage is at most 100% (keep-all).
    """
    profile = resolve_profile(profile)
    return parse_budget_text(text, profile.static_bytes, lambda: keep_all_peak(profile))


@dataclass(frozen=True)
class SpaceMinimum:
    """The smallest budget a plan of one space can meet.

    `value` is that minimum when `exact`, else a proven lower bound on it;
    `upper` is the peak of the best plan of the space found (a budget it
    certainly meets; equal to `value` when exact).
    """

    space: str
    value: int
    exact: bool
    upper: int


def space_min_budget(profile: Profile, space: str = "joint") -> SpaceMinimum:
    """The minimum budget of a plan space: `joint`, `recompute-only` or `swap-only`.

    `recompute-only` is exact for every profile (the smallest peak of any
    keep/recompute plan, found by `solvers.remat`'s DP). `joint` and
    `swap-only` are exact where a plan of the space meets `memory_lower_bound`
    (the minimum-memory plan, and for `joint` also the recompute-only
    minimum); otherwise `value` is that bound and `upper` the best plan's
    peak. `min_budget(profile)` is unchanged: the joint space's lower bound.
    """
    if space not in ("joint", "recompute-only", "swap-only"):
        raise BudgetError(f"space must be one of joint, recompute-only, swap-only, got {space!r}")
    if space == "recompute-only" or space == "joint":
        from solvers.remat.chain import ChainModel
        from solvers.remat.minpeak import min_peak

        recompute = min_peak(ChainModel(profile)).peak
        if space == "recompute-only":
            return SpaceMinimum(space, recompute, True, recompute)
    bound = memory_lower_bound(profile)
    swap = Scorer(profile).score_plan(min_memory_plan(profile))[1]
    upper = swap if space == "swap-only" else min(swap, recompute)
    return SpaceMinimum(space, upper if upper == bound else bound, upper == bound, upper)
