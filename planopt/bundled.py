"""Profiles shipped inside the package (`planopt/data/profiles/*.json`)."""

from __future__ import annotations

from importlib import resources

from planopt.errors import FormatError
from planopt.io import load_profile
from planopt.profile import Profile


def _folder():
    return resources.files("planopt") / "data" / "profiles"


def bundled_profile_names() -> list[str]:
    """Names of the bundled profiles (file names without `.json`), sorted."""
    return sorted(p.name[: -len(".json")] for p in _folder().iterdir() if p.name.endswith(".json"))


def bundled_profile(name: str) -> Profile:
    """Load a bundled profile by name; unknown names list the valid ones."""
    path = _folder() / f"{name}.json"
    if not path.is_file():
        raise FormatError(
            f"bundled profile must be one of {', '.join(bundled_profile_names())}, got {name!r}"
        )
    with resources.as_file(path) as real:
        return load_profile(real)
