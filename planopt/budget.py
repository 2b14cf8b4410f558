"""Budgets: the minimum any plan needs, fractions of keep-all, and parsing.

NOTE (why `min_budget` is exact): strictly inside a forward `F_i` of positive
duration the spec keeps `s_{i-1}` (every action frees it no earlier than the
end of `F_i`), `s_i` and the forward scratch alive; strictly inside a backward
`B_i` of positive duration it keeps `s_i` and the backward scratch. So every
plan peaks at no less than

    static + max( max_{i: fwd_i > 0} s_{i-1} + s_i + fwd_work_i,
                  max_{i: bwd_i > 0} s_i + bwd_work_i )

and `min_memory_plan` (every layer swapped, each forward waiting for the
previous copy out with `swap_wait = i + 1`, each copy back issued at the step
that needs it) peaks at exactly that when every time is positive. With
zero-duration layers (whose tensors the free-before-allocate rule may make
vanish) the witness can exceed the bound; `min_budget_info` then says the
value is a proven lower bound, not exact. The tests check both halves
against brute force.
"""

from __future__ import annotations

import math
import re

from planopt.errors import BudgetError
from planopt.plan import KEEP, SWAP, Plan
from planopt.profile import Profile

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_BUDGET_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z%]*)\s*$")


def memory_lower_bound(profile: Profile) -> int:
    """The bound of the module note: no plan peaks below it."""
    best = 0
    prev = 0
    for layer in profile.layers:
        s = layer.saved_bytes
        if layer.fwd > 0:
            best = max(best, prev + s + layer.fwd_work_bytes)
        if layer.bwd > 0:
            best = max(best, s + layer.bwd_work_bytes)
        prev = s
    return profile.static_bytes + best


def min_budget_info(profile: Profile) -> tuple[int, bool]:
    """`(value, exact)`: the minimum budget, and whether it is exact or a lower bound."""
    from planopt.simulate import Scorer

    bound = memory_lower_bound(profile)
    witness = Scorer(profile).score_plan(min_memory_plan(profile))[1]
    return (bound, True) if witness == bound else (bound, False)


def min_budget(profile: Profile) -> int:
    """The smallest budget any plan can meet.

    Exact whenever every layer has positive forward and backward times (and
    whenever `min_budget_info` says so); otherwise a proven lower bound.
    """
    return min_budget_info(profile)[0]


def min_memory_plan(profile: Profile) -> Plan:
    """A plan whose peak is exactly `min_budget(profile)` (the bound's witness)."""
    n = len(profile.layers)
    actions = [SWAP] * n
    if n:
        actions[-1] = KEEP  # nothing above it to wait; keeping it costs the same bytes
    prefetch = [i if i < n - 1 else None for i in range(n)]
    wait = [i + 1 if i < n - 1 else None for i in range(n)]
    return Plan.build(actions, prefetch, wait, profile=profile)


def keep_all_peak(profile: Profile) -> int:
    """Peak memory of keeping every tensor (the 100% point of fractional budgets)."""
    from planopt.simulate import Scorer

    return Scorer(profile).peak(*_keep_all_lists(len(profile.layers)))


def _keep_all_lists(n: int):
    return [KEEP] * n, [None] * n, [None] * n


def budget_from_fraction(profile: Profile, fraction: float) -> float:
    """`static + r * (peak_keep_all - static)` (spec: "Figures every report uses")."""
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, int | float)
        or not math.isfinite(fraction)
        or fraction < 0
    ):
        raise BudgetError(f"budget fraction must be a finite number >= 0, got {fraction!r}")
    activation = keep_all_peak(profile) - profile.static_bytes
    return profile.static_bytes + fraction * activation


def parse_budget(text: str | int | float, profile: Profile) -> float:
    """Bytes from `12884901888`, `12GiB`, `1.5GB` or `50%` (of keep-all activations)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        if not math.isfinite(text) or text < 0:
            raise BudgetError(f"budget must be a finite number of bytes >= 0, got {text!r}")
        return float(text)
    match = _BUDGET_RE.match(str(text))
    unit = match.group(2).lower() if match else None
    if not match or (unit not in _UNITS and unit != "%"):
        raise BudgetError(
            f"budget must be bytes (12884901888), a size with unit (12GiB, 1.5GB) or a "
            f"percentage of keep-all activation memory (50%), got {text!r}"
        )
    value = float(match.group(1))
    if not math.isfinite(value):
        raise BudgetError(f"budget must be a finite number, got {text!r}")
    if unit == "%":
        return budget_from_fraction(profile, value / 100.0)
    return value * _UNITS[unit]
