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


def budget_line(budget: float, minimum: int) -> str:
    return (
        f"{human_bytes(budget)} ({budget:.0f} B); every plan needs at least {human_bytes(minimum)}"
    )
