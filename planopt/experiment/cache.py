"""A content-addressed cache of sweep outcomes, so an interrupted sweep resumes.

A job's key is the SHA-256 of everything that can change its outcome: the
profile's numbers (signatures included, name and source left out), the budget
in bytes, the method's canonical name, its options, time limit and seed, and
the code version. The code version is `planopt.__version__` plus a hash of
the planner's source: every `solvers/*.py` and every top-level `planopt/*.py`
but the few that cannot change an outcome (`NOT_IN_CODE_VERSION`: the
entry point, text and figure output; the CLI is a subpackage, not hashed).
Editing a solver therefore invalidates every cached outcome; editing the
CLI, the runtime or this package does not.

One JSON file per key under `<root>/<key[:2]>/<key>.json`, written to a
temporary name and renamed, so a killed sweep never leaves a torn entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from planopt.io import profile_to_dict
from planopt.profile import Profile

DEFAULT_CACHE_DIR = ".planopt-cache"
# Top-level `planopt` modules that cannot change a solve's outcome; every other
# one (and every `solvers/*.py`) is part of the code version, so a new module a
# method comes to depend on is covered without a change here.
NOT_IN_CODE_VERSION = ("__main__.py", "plot.py", "report.py")


@cache
def code_version() -> str:
    """`planopt.__version__` + a hash of the solver and core source files."""
    import planopt
    import solvers

    digest = hashlib.sha256()
    core = sorted(Path(planopt.__file__).parent.glob("*.py"))
    files = [p for p in core if p.name not in NOT_IN_CODE_VERSION]
    files += sorted(Path(solvers.__file__).parent.glob("*.py"))
    for path in files:
        digest.update(f"{path.parent.name}/{path.name}".encode())
        digest.update(path.read_bytes())
    return f"{planopt.__version__}+{digest.hexdigest()[:16]}"


@lru_cache(maxsize=512)
def profile_digest(profile: Profile) -> str:
    """Hash of a profile's numbers and signatures (not its name or source)."""
    data = profile_to_dict(profile)
    data.pop("name", None)
    data.pop("source", None)
    data["device"].pop("name", None)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _jsonable(value: Any) -> Any:
    """Options as canonical JSON data; objects without a JSON form use their repr."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in sorted(value.items())}
    return repr(value)


def make_key(payload: dict) -> str:
    """SHA-256 of a canonical JSON rendering of `payload` (plus the code version)."""
    text = json.dumps(
        {**_jsonable(payload), "code": code_version()},
        sort_keys=True,
        separators=(",", ":"),
        allow_nan=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()


class Cache:
    """Outcomes by key in a folder (created on first write)."""

    def __init__(self, root: str | os.PathLike = DEFAULT_CACHE_DIR) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"Cache({str(self.root)!r})"

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The stored record, or None when absent or unreadable (then it is re-run)."""
        try:
            return json.loads(self.path(key).read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, record: dict) -> None:
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(record, handle, allow_nan=True)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def __contains__(self, key: str) -> bool:
        return self.path(key).is_file()

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.json")) if self.root.is_dir() else 0
