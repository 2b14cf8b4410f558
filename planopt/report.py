"""Plain-text tables and the one place numbers are formatted for reading.

Kept apart from `planopt.cli` so that experiments and notebooks print the
same figures as `planopt show` and `planopt demo` without going through
argparse: the experiment's Markdown tables format their columns with the
functions here too. Every formatter shows a missing value (None or NaN) as
`-`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from planopt.plan import Plan
from planopt.schedule import Schedule

_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def missing(value: Any) -> bool:
    """None or NaN: a figure that does not exist (no plan, no bound)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def human_bytes(n: float | None) -> str:
    """`1.50 GiB`: binary units, three significant figures at most."""
    if n is None:
        return "-"
    value = float(n)
    unit = _BINARY_UNITS[0]
    for unit in _BINARY_UNITS:
        if abs(value) < 1024 or unit == _BINARY_UNITS[-1]:
            break
        value /= 1024
    if unit == "B":
        return f"{value:.0f} B"
    return f"{value:.2f} {unit}"


def human_seconds(s: float | None) -> str:
    """`12.345 ms` below a second, `1.234 s` above: profiles are in milliseconds."""
    if s is None:
        return "-"
    if abs(s) < 1.0:
        return f"{s * 1e3:.3f} ms"
    return f"{s:.3f} s"


def percent(x: Any) -> str:
    """`12.3%` from a ratio (`0.123`); rounding noise never shows as `-0.0%`; a text
    cell (an already formatted median) passes through."""
    if missing(x):
        return "-"
    if isinstance(x, str):
        return x
    text = f"{x * 100:.1f}%"
    return "0.0%" if text == "-0.0%" else text


def gib(n: Any) -> str:
    """Bytes as a bare GiB figure (`7.50`), for columns headed `(GiB)`."""
    return "-" if missing(n) else f"{n / 2**30:.2f}"


def fmt_text(value: Any) -> str:
    return "-" if missing(value) else str(value)


def fmt_budget(value: Any) -> str:
    """A budget fraction: `0.5` -> `50%`."""
    return "-" if missing(value) else f"{100 * value:.0f}%"


def fmt_seconds(value: Any) -> str:
    """Three significant figures in s, ms or us (table cells; `human_seconds` keeps a
    profile's milliseconds exact)."""
    if missing(value):
        return "-"
    if value >= 1:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} us"


def fmt_ratio(value: Any) -> str:
    return "-" if missing(value) else f"{value:.3f}"


def fmt_int(value: Any) -> str:
    return "-" if missing(value) else f"{int(value)}"


def table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], *, right: Sequence[int] = ()
) -> str:
    """Columns padded to their widest cell; column indices in `right` align right."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[k]) for row in cells) for k in range(len(headers))]

    def line(row: list[str]) -> str:
        parts = [
            cell.rjust(widths[k]) if k in right else cell.ljust(widths[k])
            for k, cell in enumerate(row)
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def key_values(pairs: Sequence[tuple[str, object]]) -> str:
    """`key    value` lines with the values aligned."""
    width = max((len(k) for k, _ in pairs), default=0)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in pairs)


def schedule_summary(schedule: Schedule, plan: Plan) -> list[tuple[str, str]]:
    """The figures every command reports for one simulated plan (spec: "Figures")."""
    if schedule.budget is None:
        fits = "no budget given"
    else:
        verdict = "fits" if schedule.feasible else "does NOT fit"
        fits = f"{verdict} budget {human_bytes(schedule.budget)} ({schedule.budget:.0f} B)"
    return [
        ("makespan", human_seconds(schedule.makespan)),
        ("T_ideal", human_seconds(schedule.t_ideal)),
        ("overhead", percent(schedule.overhead)),
        ("peak", f"{human_bytes(schedule.peak_bytes)} ({schedule.peak_bytes} B), {fits}"),
        ("stall", human_seconds(schedule.stall_seconds)),
        ("recompute", human_seconds(schedule.recompute_seconds)),
        ("actions", plan.summary()),
    ]
