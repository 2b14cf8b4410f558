"""Tables as data, written as CSV (raw numbers) and Markdown (formatted for reading).

A `Table` is a title, columns and rows of plain values. The CSV keeps full
precision (ratios as ratios, seconds as seconds) for anyone re-analysing;
the Markdown formats each column with its `fmt` (`planopt.report`'s
formatters: percentages, GiB, ...).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planopt.report import fmt_text


@dataclass(frozen=True)
class Column:
    """`key` into each row; `fmt` renders it in Markdown; numbers align right."""

    key: str
    header: str
    fmt: Callable[[Any], str] = fmt_text
    right: bool = True


@dataclass(frozen=True)
class Table:
    name: str
    title: str
    columns: tuple[Column, ...]
    rows: tuple[dict[str, Any], ...]
    note: str = ""
    extra_csv_keys: tuple[str, ...] = field(default=())
    markdown: bool = True  # False: too long to read; written as CSV only

    def csv_keys(self) -> list[str]:
        keys = [c.key for c in self.columns]
        return keys + [k for k in self.extra_csv_keys if k not in keys]

    def to_markdown(self, *, heading: str = "##") -> str:
        lines = [f"{heading} {self.title}", ""]
        if self.note:
            lines += [self.note, ""]
        if not self.rows:
            return "\n".join([*lines, "(no rows)", ""])
        headers = [c.header for c in self.columns]
        rule = ["---:" if c.right else "---" for c in self.columns]
        lines.append("| " + " | ".join(headers) + " |")
        lines.append("|" + "|".join(rule) + "|")
        for row in self.rows:
            cells = [c.fmt(row.get(c.key)).replace("|", "\\|") for c in self.columns]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join([*lines, ""])

    def write_csv(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=self.csv_keys(), extrasaction="ignore")
            writer.writeheader()
            for row in self.rows:
                writer.writerow({k: _csv_value(row.get(k)) for k in self.csv_keys()})
        return path


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return value


def write_tables(
    tables: Sequence[Table], folder: str | Path, stem: str, *, title: str, preamble: str = ""
) -> list[Path]:
    """One Markdown file `<stem>.md` with every table, and one CSV per table."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    parts = [f"# {title}", ""]
    if preamble:
        parts += [preamble, ""]
    parts += [t.to_markdown() for t in tables if t.markdown]
    listed = [f"`{t.name}.csv`" for t in tables]
    parts += [f"Every table as CSV (full precision): {', '.join(listed)}.", ""]
    md = folder / f"{stem}.md"
    md.write_text("\n".join(parts).rstrip() + "\n")
    return [md, *(t.write_csv(folder / f"{t.name}.csv") for t in tables)]


def write_rows_csv(rows: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """Rows of plain values as CSV, columns in first-seen order."""
    rows = list(rows)
    keys: dict[str, None] = {}
    for row in rows:
        keys.update(dict.fromkeys(row))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(keys))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _csv_value(row.get(k)) for k in keys})
    return path
