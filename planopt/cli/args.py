"""Argument types and loaders of every command, in one place.

argparse types (`time_limit`, `work_limit`, `seed`, `budget_fraction`,
`positive_int`, `noise`) raise `argparse.ArgumentTypeError`, which `main` turns into one error line;
loaders (`load_profile_arg`, `budget_arg`, `check_output_path`) raise a
`PlanoptError` naming the rule, the value and the option.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path

from planopt.api import check_time_limit
from planopt.budget import parse_budget
from planopt.bundled import bundled_profile, bundled_profile_names
from planopt.errors import FormatError, SolverOptionError
from planopt.io import load_profile
from planopt.profile import Profile
from planopt.simulate import check_budget
from planopt.work import check_work_limit

WORK_UNIT_HELP = (
    "work units (one is about a second of one core of the reference machine, counted "
    "from the search's own steps, never from a clock): with a work limit and no binding "
    "time limit, the plan is the same on any machine"
)


def load_profile_arg(arg: str) -> Profile:
    """A profile from a JSON file or, when no such file exists, a bundled name."""
    path = Path(arg)
    if path.is_file():
        return load_profile(path)
    names = bundled_profile_names()
    if arg in names:
        return bundled_profile(arg)
    if path.exists() or path.suffix or os.sep in arg:
        return load_profile(path)  # its error names the file and why it cannot be read
    raise FormatError(
        f"profile must be a JSON file or a bundled profile ({', '.join(names)}), "
        f"got {arg!r} (no such file)"
    )


def whole_bytes(n: float) -> int:
    """A byte budget as whole bytes, rounded down: peaks are whole bytes, so a plan fits
    `n` exactly when it fits `floor(n)` (a "50%" budget is rarely a whole number)."""
    return math.floor(n)


def budget_arg(text: str | None, profile: Profile) -> int | None:
    """`--budget B` (bytes, a size or a percentage) for `profile` in whole bytes, or None."""
    return None if text is None else whole_bytes(check_budget(parse_budget(text, profile)))


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


def check_output_path(path: str | os.PathLike | None, what: str, *, folder: bool = False) -> None:
    """Refuse an output path before any work: its parent folder must exist, and it must
    not be a folder (with `folder=True`, it must not be a file: the command fills it).

    NOTE: the one rule for every output (`--output`, `--plot`, a sweep's
    `--out`): the parent folder must exist; nothing is created above the
    path, so a typo is an error, not a new tree of folders somewhere.
    """
    if path is None:
        return
    target = Path(path)
    parent = target.parent
    if parent.exists() and not parent.is_dir():
        raise FormatError(
            f"{what} must be a writable file, got {str(path)!r} ({str(parent)!r} is a file)"
        )
    if not parent.is_dir():
        raise FormatError(f"{what} folder must exist, got {str(parent)!r} for {str(path)!r}")
    if folder and target.exists() and not target.is_dir():
        raise FormatError(f"{what} must be a folder, got the file {str(path)!r}")
    if not folder and target.is_dir():
        raise FormatError(f"{what} must be a file path, got the folder {str(path)!r}")


def budget_fraction(text: str) -> float:
    """argparse type: `50%` or `0.5` (a share of keep-all activation memory)."""
    raw = text[:-1] if text.endswith("%") else text
    try:
        value = float(raw) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"budget must be a percentage (50%) or fraction (0.5) of keep-all activation "
            f"memory, got {text!r}"
        ) from None
    if not 0 <= value <= 10:
        raise argparse.ArgumentTypeError(f"budget must be between 0% and 1000%, got {text!r}")
    return value


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
