"""`planopt methods`: the registry, fitted to the terminal (never importing a back-end).

One table when it fits the terminal's width (`shutil.get_terminal_size`;
80 columns in a pipe), else one block per method with its lines wrapped
at word boundaries, so no line is wider than the terminal and no method or
option name is ever split.
"""

from __future__ import annotations

import argparse
import shutil
import textwrap

from planopt import registry
from planopt.cli.common import EXIT_OK, AddCommand
from planopt.report import table

HEADERS = ("method (aliases)", "available", "role", "space", "options", "summary")
INDENT = "    "
NOTE = (
    "Options are keyword arguments of planopt.solve() and, on the command line, "
    "`planopt solve --option NAME=VALUE`; every method also takes --time-limit, "
    "--work-limit and --seed, and those with a backend option --backend. Roles: baseline "
    "(a published rule), heuristic (a search, no proof), exact (the optimum of its space, "
    "proven), oracle (exact by enumeration, tiny nets only), bound (a proven lower bound, "
    "no plan). Space: the plans a method chooses among; '+ options': it also chooses "
    "a partial option of a layer's menu (cost model v3), where the others refuse a "
    "profile with menus or, for fixed rules, plan whole layers."
)


def register(command: AddCommand) -> None:
    command(
        "methods",
        "list the registered methods: availability, role, plan space and options",
        run,
    )


def options_cell(spec: registry.MethodSpec) -> str:
    if not spec.is_available():
        return "-"
    try:
        options = spec.options()
    except (ImportError, AttributeError) as exc:
        # A registration pointing at missing code must not hide the other methods.
        return f"cannot load {spec.target}: {exc}"
    return ", ".join(options) or "-"


def method_row(spec: registry.MethodSpec) -> list[str]:
    aliases = f" ({', '.join(spec.aliases)})" if spec.aliases else ""
    missing = registry.missing_modules(spec.requires)
    return [
        spec.name + aliases,
        f"no (needs {', '.join(missing)})" if missing else "yes",
        spec.role.value,
        spec.space_label,
        options_cell(spec),
        spec.summary,
    ]


def _fill(text: str, width: int, indent: str = "") -> str:
    return textwrap.fill(
        text,
        max(width, 20),
        initial_indent=indent,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def blocks(rows: list[list[str]], width: int) -> str:
    """One block per method: its name and role, then its summary and options, wrapped."""
    out = []
    for name, available, role, space, options, summary in rows:
        head = f"{name} - {role}, {space} space" + ("" if available == "yes" else f", {available}")
        out += [
            _fill(head, width),
            _fill(summary, width, INDENT),
            _fill(f"options: {options}", width, INDENT),
        ]
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    rows = [method_row(registry.get(name)) for name in registry.names()]
    width = shutil.get_terminal_size().columns
    text = table(HEADERS, rows)
    if max(len(line) for line in text.splitlines()) > width:
        text = blocks(rows, width)
    print(text)
    print()
    print(_fill(NOTE, width))
    return EXIT_OK
