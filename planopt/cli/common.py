"""What every command shares: exit codes, the registration signature, printing.

Kept apart from `main` so a command module never imports the parser that
imports it (no import loop between `main` and the commands).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from planopt.profile import Profile
from planopt.report import human_bytes

EXIT_OK = 0
EXIT_NO_FIT = 1
EXIT_BAD_INPUT = 2

Run = Callable[[argparse.Namespace], int]
# `command(name, help, run)` -> the new subcommand's parser (see `main.build_parser`).
AddCommand = Callable[[str, str, Run], argparse.ArgumentParser]


def dump(data: dict) -> None:
    """The `--json` output: one JSON object on stdout."""
    print(json.dumps(data, indent=1))


def note(status: str, message: str) -> None:
    """One `planopt: STATUS: ...` line on stderr (the reason behind exit code 1)."""
    print(f"planopt: {status}: {' '.join(message.splitlines())}", file=sys.stderr)


def profile_line(profile: Profile) -> str:
    return f"{profile.name} ({len(profile.layers)} layers)"


def budget_line(
    budget: float, minimum: int, exact: bool | None = None, upper: int | None = None
) -> str:
    """The budget and what every plan needs: `exact` (None: not worked out) says whether
    `minimum` is the smallest budget some plan meets or only a lower bound, and `upper`
    the minimum-memory plan's peak (a budget some plan meets)."""
    line = (
        f"{human_bytes(budget)} ({budget:.0f} B); every plan needs at least {human_bytes(minimum)}"
    )
    if exact is True:
        return line + " (exact: the minimum-memory plan needs no more)"
    if exact is False and upper is not None:
        return line + (
            f" (a lower bound only: the minimum-memory plan needs {human_bytes(upper)}, "
            "so the smallest budget any plan meets lies between)"
        )
    return line
