"""The budget grammar: a number or a text (`12884901888`, `12GiB`, `50%`) to whole bytes.

It sits below the simulator (`planopt.simulate` takes budgets) and below
`planopt.budget` (which computes the figures a percentage is a share of,
with the simulator): a percentage is turned into bytes through the
caller's `keep_all` (the keep-all peak, computed only when asked), so this
module imports nothing of the model and the dependency runs one way.

NOTE (budgets): a budget is whole bytes everywhere (peaks are whole bytes,
so a plan fits `b` exactly when it fits `floor(b)`). A byte count (a bare
number, or one in `B`) must be a whole number: `1.5` bytes is no count
anyone means, and rounding it down read `--budget 1.5` as 1 byte. A size in
a larger unit (`1.3GiB`) and a percentage of keep-all (`50%` of an odd
number) are rounded down to whole bytes, never allowing more than asked,
and computed exactly from the decimal text (no float rounding of `0.3kB` to
299.99...). A bare number strictly between 0 and 1 is refused with the
percentage it likely meant. A percentage is at most 100%: 100% is keep-all
(every layer kept), the peak no plan needs to exceed, so `150%` is a likely
typo (a budget above keep-all is given in bytes). The largest budget is the
simulator's int64; a larger one is no limit at all and a likely typo.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction

from planopt.errors import BudgetError, show

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
_NUMBER = r"[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?"
_BUDGET_RE = re.compile(rf"^\s*({_NUMBER})\s*([a-zA-Z%]*)\s*$")
_NEGATIVE_RE = re.compile(rf"^\s*-\s*{_NUMBER}\s*([a-zA-Z%]*)\s*$")
_FORMS = (
    "bytes (12884901888), a size with unit (12GiB, 1.5GB) or a percentage of keep-all "
    "activation memory (50%)"
)


def whole(value: Fraction | int, given: str) -> int:
    """`value` rounded down to whole bytes, within MAX_BUDGET_BYTES."""
    result = math.floor(value)
    if result > MAX_BUDGET_BYTES:
        raise BudgetError(
            f"budget must be at most {MAX_BUDGET_BYTES} bytes (2^63 - 1), got {given}"
        )
    return result


def _bare_fraction(value: Fraction, given: str) -> BudgetError:
    percent = f"{float(value * 100):g}%"
    example = "" if percent == "50%" else " (50% is half)"
    return BudgetError(
        f"budget must be whole bytes or a percentage, got {given}: a bare number below 1 "
        f"is no byte count; for a share of keep-all activation memory write {percent}{example}"
    )


def _byte_count(value: Fraction, given: str) -> int:
    """A count of bytes: whole, or refused (below 1 with the percentage it likely meant)."""
    if 0 < value < 1:
        raise _bare_fraction(value, given)
    if value.denominator != 1:
        raise BudgetError(
            f"budget in bytes must be a whole number, got {given}: a byte count has no "
            f"fraction (a size with a unit, 1.5GiB, or a percentage, 50%, is rounded down "
            f"to whole bytes)"
        )
    return whole(value, given)


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


def check_share(share: Fraction, given: str) -> Fraction:
    """A share of keep-all activation memory in [0, 1] (100% is keep-all itself)."""
    if share > 1:
        raise _above_keep_all(given)
    return share


def _above_keep_all(given: str) -> BudgetError:
    return BudgetError(
        f"budget as a percentage must be at most 100%, got {given}: that is above "
        f"keep-all (100% is keep-all, every layer kept, the peak no plan needs to "
        f"exceed); a budget beyond it is given in bytes"
    )


def of_keep_all(static: int, keep_all: int, share: Fraction, given: str) -> int:
    """`floor(static + share * (keep_all - static))` in whole bytes (spec: "Figures
    every report uses"), `share` in [0, 1]."""
    return whole(static + check_share(share, given) * (keep_all - static), given)


def number_bytes(value: int | float) -> int:
    """A budget given as a number: a whole count of bytes (`parse_budget_text`'s rule)."""
    if value != value or value < 0 or value == math.inf:
        raise BudgetError(f"budget must be a finite number of bytes >= 0, got {show(value)}")
    return _byte_count(Fraction(value), show(value))


def parse_budget_text(text: object, static: int, keep_all: Callable[[], int]) -> int:
    """Whole bytes from a number, `12884901888`, `12GiB`, `1.5GB` or `50%` (see the NOTE).

    `static` and `keep_all()` (the keep-all peak, asked for only by a
    percentage) are the profile's figures a percentage is a share of.
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        return number_bytes(text)
    match = _BUDGET_RE.match(text) if isinstance(text, str) else None
    unit = match.group(2).lower() if match else None
    if not match or (unit not in _UNITS and unit != "%"):
        negative = _NEGATIVE_RE.match(text) if isinstance(text, str) else None
        if negative and (negative.group(1).lower() in _UNITS or negative.group(1) == "%"):
            raise BudgetError(f"budget must be >= 0, got {show(text)}")
        raise BudgetError(f"budget must be {_FORMS}, got {show(text)}")
    exact = _exact(match.group(1))
    if exact is None and unit == "%":
        raise _above_keep_all(show(text))
    if exact is None:
        raise BudgetError(
            f"budget must be at most {MAX_BUDGET_BYTES} bytes (2^63 - 1), got {show(text)}"
        )
    value, nonzero = exact
    if unit == "%":
        return of_keep_all(static, keep_all(), value / 100, show(text))
    if unit in ("", "b"):
        if nonzero and value == 0:  # below 10^-40: under one byte, not zero
            raise _bare_fraction(value, show(text)) if unit == "" else _not_whole(text)
        return _byte_count(value, show(text))
    return whole(value * _UNITS[unit], show(text))


def _not_whole(text: str) -> BudgetError:
    return BudgetError(f"budget in bytes must be a whole number, got {show(text)}")


def parse_budget_fraction(text: str) -> float:
    """A share of keep-all activation memory from `50%` (0.5): the percentages of the
    budget grammar, for commands that take one budget for many profiles (sweeps).

    A bare number is refused, below 1 with the percentage it likely meant,
    so `0.5` means the same (an error) here as in `parse_budget`; a
    percentage above 100% is refused as in `parse_budget`.
    """
    match = _BUDGET_RE.match(text) if isinstance(text, str) else None
    if match and match.group(2) == "%":
        exact = _exact(match.group(1))
        if exact is None:
            raise _above_keep_all(show(text))
        return float(check_share(exact[0] / 100, show(text)))
    if match and match.group(2) == "":
        exact = _exact(match.group(1))
        if exact is not None and exact[1] and exact[0] < 1:
            raise _bare_fraction(exact[0], show(text))
    if isinstance(text, str) and _NEGATIVE_RE.match(text):
        raise BudgetError(f"budget must be a percentage >= 0%, got {show(text)}")
    raise BudgetError(
        f"budget must be a percentage of keep-all activation memory (50%), got {show(text)}"
    )
