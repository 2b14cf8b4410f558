"""One rule for every output path, and the one writer that follows it.

NOTE: every output (`save_plan`, `save_profile`, the CLI's `--output`,
`--plot`, a sweep's `--out`) is checked by `check_output_path` before any
work: its parent folder must exist (nothing is created above the path, so
a typo is an error, not a new tree of folders somewhere), the target must
not be a folder (or, with `folder=True`, not a file), and the location must
be writable. `os.access` cannot see everything (root passes it, a full
device passes it), so `write_text` also turns the write's own failure into
the same error.
"""

from __future__ import annotations

import os
from pathlib import Path

from planopt.errors import OutputPathError


def _as_path(path: object, what: str) -> Path:
    if isinstance(path, bytes) or not isinstance(path, str | os.PathLike):
        raise OutputPathError(f"{what} must be a file path (a string), got {path!r}")
    text = os.fspath(path)
    if not isinstance(text, str) or not text:
        raise OutputPathError(f"{what} must be a non-empty file path, got {path!r}")
    if "\0" in text:
        raise OutputPathError(f"{what} must not hold a NUL character, got {text!r}")
    return Path(text)


def check_output_path(path: str | os.PathLike, what: str, *, folder: bool = False) -> Path:
    """`path` as a `Path` when it can be written, else an `OutputPathError`.

    `what` names the output in the message (`"--output"`, `"plan file"`).
    With `folder=True` the target is a folder the caller fills: it may exist
    as a folder, not as a file.
    """
    target = _as_path(path, what)
    parent = target.parent
    if not parent.is_dir():
        rule = "must be a folder, got a file" if parent.exists() else "must exist (none is created)"
        raise OutputPathError(f"{what}: the folder {str(parent)!r} {rule}, for {str(target)!r}")
    if folder:
        if target.exists() and not target.is_dir():
            raise OutputPathError(f"{what} must be a folder, got the file {str(target)!r}")
    elif target.is_dir():
        raise OutputPathError(f"{what} must be a file path, got the folder {str(target)!r}")
    exists = target.exists()
    if not os.access(target if exists else parent, os.W_OK if exists else os.W_OK | os.X_OK):
        raise OutputPathError(f"{what} {str(target)!r} cannot be written (permission denied)")
    return target


def write_text(path: str | os.PathLike, text: str, what: str) -> Path:
    """Write `text` (UTF-8) to `path` after `check_output_path`; a failed write is an
    `OutputPathError` naming the path and the system's reason."""
    target = check_output_path(path, what)
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise OutputPathError(f"{what} {str(target)!r} cannot be written ({reason})") from None
    return target
