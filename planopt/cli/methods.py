"""`planopt methods`: the registry as a table (never importing a heavy back-end)."""

from __future__ import annotations

import argparse
import importlib.util

from planopt import registry
from planopt.cli.common import EXIT_OK, AddCommand
from planopt.report import table


def register(command: AddCommand) -> None:
    command("methods", "list the registered methods, their availability and options", run)


def options_cell(spec: registry.MethodSpec) -> str:
    if not spec.is_available():
        return "-"
    try:
        options = spec.options()
    except (ImportError, AttributeError) as exc:
        # A registration pointing at missing code must not hide the other methods.
        return f"cannot load {spec.target}: {exc}"
    return ", ".join(options) or "-"


def run(args: argparse.Namespace) -> int:
    rows = []
    for name in registry.names():
        spec = registry.get(name)
        missing = [m for m in spec.requires if importlib.util.find_spec(m) is None]
        rows.append(
            [
                spec.name,
                ", ".join(spec.aliases) or "-",
                f"no (needs {', '.join(missing)})" if missing else "yes",
                "yes" if spec.exact else "no",
                options_cell(spec),
                spec.summary,
            ]
        )
    headers = ["method", "aliases", "available", "exact", "options", "summary"]
    print(table(headers, rows))
    print(
        "\nOptions are keyword arguments of planopt.solve(); on the command line every "
        "method takes --time-limit and --seed, and those with a backend option --backend."
    )
    return EXIT_OK
