"""The parser and the entry point: every command registered, every user error one line.

Every error a user can cause arrives here as a `PlanoptError` (or an
argparse complaint) and leaves as one `planopt: error: ...` line with exit
code 2. Nothing else is caught: a bug still shows its traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Sequence

from planopt import __version__
from planopt.bundled import bundled_profile_names
from planopt.cli import (
    demo,
    experiment,
    methods,
    profile_model,
    run_check,
    show,
    simulate,
    solve,
)
from planopt.cli.args import keep_signed_values
from planopt.cli.common import EXIT_BAD_INPUT, EXIT_OK, Run
from planopt.errors import PlanoptError

COMMANDS = (simulate, solve, show, methods, demo, experiment, run_check, profile_model)

EXIT_CODES = """\
exit codes:
  0  success
  1  no plan that fits: solve ended infeasible (proven), no plan found (a
     heuristic found none) or timeout (the reason is still printed), or
     simulate --budget found the plan's peak above it
  2  bad input: unreadable or malformed profile or plan, a bad budget,
     method, option, time or work limit, a plan made for another profile, or
     an output path that cannot be written
"""


def _epilog() -> str:
    inputs = (
        "PROFILE is a path to a planopt.profile JSON file (/2, or /1) or the name of a bundled "
        f"profile ({', '.join(bundled_profile_names())}). BUDGET is bytes (12884901888), "
        "a size (12GiB, 1.5GB) or a percentage of keep-all activation memory (50%)."
    )
    return textwrap.fill(inputs, 78, break_on_hyphens=False) + "\n\n" + EXIT_CODES


class _UsageError(Exception):
    """argparse's complaint, turned into our one-line error instead of a usage dump."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    epilog = _epilog()
    parser = _Parser(
        prog="planopt",
        description=(
            "Plan keep/swap/recompute of saved activations for GPU training under a "
            "memory budget, and simulate plans with the planopt cost model."
        ),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"planopt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_: str, run: Run) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            help=help_,
            description=help_,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(run=run)
        return p

    for module in COMMANDS:
        module.register(command)
    return parser


def _fail(message: str) -> int:
    print(f"planopt: error: {' '.join(message.splitlines())}", file=sys.stderr)
    return EXIT_BAD_INPUT


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (see the epilog)."""
    parser = build_parser()
    try:
        args = parser.parse_args(keep_signed_values(sys.argv[1:] if argv is None else argv))
    except argparse.ArgumentError as exc:  # a signed `--budgets` value (keep_signed_values)
        return _fail(str(exc))
    except _UsageError as exc:
        return _fail(str(exc))
    except SystemExit as exc:  # --help and --version exit 0 through argparse
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    try:
        return args.run(args)
    except PlanoptError as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        print("planopt: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`planopt demo | head`): stop quietly, as a
        # process killed by SIGPIPE would, and keep Python's flush at exit quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
