"""Argument types and loaders of every command, in one place.

argparse types (`time_limit`, `work_limit`, `seed`, `budget_fraction`,
`positive_int`, `noise`) raise `argparse.ArgumentTypeError`, which `main` turns into one error line;
loaders (`load_profile_arg`, `budget_arg`, `check_output_path`) raise a
`PlanoptError` naming the rule, the value and the option.

NOTE: one code path. Every check here is the library's own
(`planopt.bundled.resolve_profile`, `planopt.budget.parse_budget` and
`parse_budget_fraction`, `planopt.paths.check_output_path`,
`planopt.api.check_time_limit`, `planopt.work.check_work_limit`): the
command line and `planopt.solve` accept and refuse the same inputs with the
same messages, and a rule changes in one place.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from planopt import paths
from planopt.api import check_time_limit
from planopt.budget import parse_budget, parse_budget_fraction
from planopt.bundled import resolve_profile
from planopt.errors import BudgetError, SolverOptionError
from planopt.profile import Profile
from planopt.work import check_work_limit

WORK_UNIT_HELP = (
    "work units (one is about a second of one core of the reference machine, counted "
    "from the search's own steps, never from a clock): with a work limit and no binding "
    "time limit, the plan is the same on any machine"
)


def load_profile_arg(arg: str) -> Profile:
    """A profile from a JSON file or, when no such file exists, a bundled name
    (`planopt.bundled.resolve_profile`, the API's rule)."""
    return resolve_profile(arg)


def whole_bytes(n: float) -> int:
    """A byte budget as whole bytes, rounded down: peaks are whole bytes, so a plan fits
    `n` exactly when it fits `floor(n)` (a "50%" budget is rarely a whole number)."""
    return math.floor(n)


def budget_arg(text: str | None, profile: Profile) -> int | None:
    """`--budget B` (bytes, a size or a percentage) for `profile` in whole bytes, or None
    (`planopt.budget.parse_budget`: a bare number below 1 is refused with its percentage)."""
    return None if text is None else parse_budget(text, profile)


def _checked_number(text: str, check: Callable[[object], float | None]) -> float:
    """A number checked by `planopt.solve`'s own rule (`check`), as an argparse type."""
    try:
        value: object = float(text)
    except ValueError:
        value = text
    try:
        checked = check(value)
    except SolverOptionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    assert checked is not None
    return checked


def time_limit(text: str) -> float:
    """argparse type: seconds > 0, checked before any work starts."""
    return _checked_number(text, check_time_limit)


def work_limit(text: str) -> float:
    """argparse type: work units > 0, checked before any work starts."""
    return _checked_number(text, check_work_limit)


def seed(text: str) -> int:
    """argparse type: an integer >= 0 (`planopt.solve`'s rule)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"seed must be an integer >= 0, got {text!r}")
    return value


def check_output_path(
    path: str | os.PathLike | None, what: str, *, folder: bool = False
) -> Path | None:
    """Refuse an output path before any work (`planopt.paths.check_output_path`, the rule
    `save_plan`, `save_profile` and figures follow: the parent folder must exist and
    nothing is created above the path); None when the option was not given."""
    return None if path is None else paths.check_output_path(path, what, folder=folder)


def budget_fraction(text: str) -> float:
    """argparse type: a share of keep-all activation memory, `50%`
    (`planopt.budget.parse_budget_fraction`: `0.5` is refused, as in `--budget`)."""
    try:
        return parse_budget_fraction(text)
    except BudgetError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def noise(text: str) -> float:
    """argparse type: a relative noise in [0, 1), as `0.1` or `10%`."""
    try:
        value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"noise must be in [0, 1) (or 0% to 99%), got {text!r}")
    return value


# NOTE (values with a minus): argparse reads a token that starts with `-` and
# is no plain number (`-5%`, `-1GiB`) as an option, so `--budget -5%` said
# "expected one argument". These options' values are glued on (`--budget=-5%`)
# and the list of `--budgets` is checked by its own type, so the value's own
# rule says what is wrong (a budget must be >= 0).
_SIGNED = re.compile(r"^-\s*\.?[0-9]")
ONE_VALUE_OPTIONS = ("--budget", "--noise")
LIST_OPTIONS: dict[str, Callable[[str], object]] = {"--budgets": budget_fraction}


def keep_signed_values(argv: Sequence[str]) -> list[str]:
    """`argv` with `--budget -5%` as `--budget=-5%` (see the NOTE); a signed value in
    the list of `--budgets` raises its type's complaint, as argparse would word it."""
    args = list(argv)
    out: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            return out + args[i:]
        following = args[i + 1] if i + 1 < len(args) else ""
        if token in ONE_VALUE_OPTIONS and _SIGNED.match(following):
            out.append(f"{token}={following}")
            i += 2
            continue
        out.append(token)
        i += 1
        if token in LIST_OPTIONS:
            while i < len(args) and not args[i].startswith("--"):
                if _SIGNED.match(args[i]):
                    try:
                        LIST_OPTIONS[token](args[i])
                    except argparse.ArgumentTypeError as exc:
                        raise argparse.ArgumentError(None, f"argument {token}: {exc}") from None
                out.append(args[i])
                i += 1
    return out
