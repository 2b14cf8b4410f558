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
import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from planopt.bundled import resolve_profile
from planopt.errors import BudgetError, show
from planopt.plan import KEEP, SWAP, Plan, need_indices
from planopt.profile import Profile

# NOTE (budgets): a budget is whole bytes everywhere (peaks are whole bytes,
# so a plan fits `b` exactly when it fits `floor(b)`): a fractional result
# ("50%" of an odd number, "1.5" bytes) is rounded down, never allowing more
# than asked, and computed exactly from the decimal text (no float rounding
# of "0.3kB" to 299.99...). A bare number strictly between 0 and 1 is no
# byte count anyone means: it is refused with the percentage it likely
# meant. The largest budget is the simulator's int64; a larger one is no
# limit at all and a likely typo.
MAX_BUDGET_BYTES = 2**63 - 1
# Decimal exponents beyond this are settled without exact arithmetic (which
# would build integers of that many digits): above, the value is too large;
# below, it is under one byte even times the largest unit or profile.
_EXPONENT_RANGE = 40

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
    from planopt.simulate import Scorer

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
    """A plan whose peak is exactly `min_budget(profile)` (the bound's witness)."""
    profile = resolve_profile(profile)
    n = len(profile.layers)
    actions = [SWAP] * n
    if n:
        actions[-1] = KEEP  # nothing above it to wait; keeping it costs the same bytes
    need = need_indices(actions, profile)
    prefetch = [need[i] if i < n - 1 else None for i in range(n)]
    wait = [i + 1 if i < n - 1 else None for i in range(n)]
    return Plan.build(actions, prefetch, wait, profile=profile)


def keep_all_peak(profile: Profile | str) -> int:
    """Peak memory of keeping every tensor (the 100% point of fractional budgets)."""
    from planopt.simulate import Scorer

    profile = resolve_profile(profile)
    return Scorer(profile).peak(*_keep_all_lists(len(profile.layers)))


def _keep_all_lists(n: int):
    return [KEEP] * n, [None] * n, [None] * n


def budget_from_fraction(profile: Profile | str, fraction: float) -> int:
    """`floor(static + r * (peak_keep_all - static))` in whole bytes (spec: "Figures
    every report uses"), exact for the float `fraction` given."""
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, int | float)
        or fraction != fraction
        or fraction < 0
        or fraction == math.inf
    ):
        raise BudgetError(f"budget fraction must be a finite number >= 0, got {show(fraction)}")
    return _of_keep_all(resolve_profile(profile), Fraction(fraction), show(fraction))


def _of_keep_all(profile: Profile, share: Fraction, given: str) -> int:
    static = profile.static_bytes
    return _whole(static + share * (keep_all_peak(profile) - static), given)


def _whole(value: Fraction | int, given: str) -> int:
    """`value` rounded down to whole bytes, within MAX_BUDGET_BYTES."""
    whole = math.floor(value)
    if whole > MAX_BUDGET_BYTES:
        raise BudgetError(
            f"budget must be at most {MAX_BUDGET_BYTES} bytes (2^63 - 1), got {given}"
        )
    return whole


def _bare_fraction(value: Fraction, given: str) -> BudgetError:
    percent = f"{float(value * 100):g}%"
    example = "" if percent == "50%" else " (50% is half)"
    return BudgetError(
        f"budget must be whole bytes or a percentage, got {given}: a bare number below 1 "
        f"is no byte count; for a share of keep-all activation memory write {percent}{example}"
    )


def _exact(number: str) -> tuple[Fraction, bool] | None:
    """`(value, nonzero)` of a decimal text, exact; None when beyond 10^40. A value
    below 10^-40 comes back as 0 with `nonzero` set (see `_EXPONENT_RANGE`)."""
    decimal = Decimal(number)
    if decimal.is_zero():
        return Fraction(0), False
    if decimal.adjusted() > _EXPONENT_RANGE:
        return None
    if decimal.adjusted() < -_EXPONENT_RANGE:
        return Fraction(0), True
    return Fraction(decimal), True


def number_bytes(value: int | float) -> int:
    """A budget given as a number: whole bytes, rounded down (`parse_budget`'s rule)."""
    if value != value or value < 0 or value == math.inf:
        raise BudgetError(f"budget must be a finite number of bytes >= 0, got {show(value)}")
    if 0 < value < 1:
        raise _bare_fraction(Fraction(value), show(value))
    return _whole(Fraction(value) if isinstance(value, float) else value, show(value))


def parse_budget(text: str | int | float, profile: Profile | str) -> int:
    """Whole bytes from `12884901888`, `12GiB`, `1.5GB` or `50%` (of keep-all activations).

    The one budget grammar of the API and the command line (see the NOTE):
    rounded down to whole bytes; a bare number below 1 is refused with the
    percentage it likely meant.
    """
    profile = resolve_profile(profile)
    if isinstance(text, int | float) and not isinstance(text, bool):
        return number_bytes(text)
    match = _BUDGET_RE.match(text) if isinstance(text, str) else None
    unit = match.group(2).lower() if match else None
    if not match or (unit not in _UNITS and unit != "%"):
        raise BudgetError(
            f"budget must be bytes (12884901888), a size with unit (12GiB, 1.5GB) or a "
            f"percentage of keep-all activation memory (50%), got {show(text)}"
        )
    exact = _exact(match.group(1))
    if exact is None:
        raise BudgetError(
            f"budget must be at most {MAX_BUDGET_BYTES} bytes (2^63 - 1), got {show(text)}"
        )
    value, nonzero = exact
    if unit == "%":
        return _of_keep_all(profile, value / 100, show(text))
    if unit == "" and nonzero and value < 1:
        raise _bare_fraction(value, show(text))
    return _whole(value * _UNITS[unit], show(text))


def parse_budget_fraction(text: str) -> float:
    """A share of keep-all activation memory from `50%` (0.5): the percentages of the
    budget grammar, for commands that take one budget for many profiles (sweeps).

    A bare number is refused, below 1 with the percentage it likely meant,
    so `0.5` means the same (an error) here as in `parse_budget`.
    """
    match = _BUDGET_RE.match(text) if isinstance(text, str) else None
    if match and match.group(2) == "%":
        exact = _exact(match.group(1))
        if exact is not None:
            return float(exact[0] / 100)
    if match and match.group(2) == "":
        exact = _exact(match.group(1))
        if exact is not None and exact[1] and exact[0] < 1:
            raise _bare_fraction(exact[0], show(text))
    raise BudgetError(
        f"budget must be a percentage of keep-all activation memory (50%), got {show(text)}"
    )


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
    from planopt.simulate import Scorer

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
