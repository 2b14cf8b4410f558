"""Profiles shipped inside the package (`planopt/data/profiles/*.json`), and the one
resolver that turns whatever names a profile (a `Profile`, a bundled name, a
path) into a `Profile`, so every entry point takes the same things."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from planopt.errors import FormatError, InvalidProfileError, show
from planopt.io import load_profile
from planopt.profile import Profile


def _folder():
    return resources.files("planopt") / "data" / "profiles"


def bundled_profile_names() -> list[str]:
    """Names of the bundled profiles (file names without `.json`), sorted."""
    return sorted(p.name[: -len(".json")] for p in _folder().iterdir() if p.name.endswith(".json"))


def bundled_profile(name: str) -> Profile:
    """Load a bundled profile by name; unknown names list the valid ones."""
    names = bundled_profile_names()
    if not isinstance(name, str) or name not in names:
        raise FormatError(f"bundled profile must be one of {', '.join(names)}, got {show(name)}")
    with resources.as_file(_folder() / f"{name}.json") as real:
        return load_profile(real)


def resolve_profile(profile: Profile | str | os.PathLike) -> Profile:
    """The `Profile` that `profile` names: itself, a profile file, or a bundled name.

    An existing file wins over a bundled name of the same spelling (as on
    the command line). A string that is neither is refused with the bundled
    names listed, or, when it looks like a path (a folder separator or a
    suffix), with the reason the file cannot be read.
    """
    if isinstance(profile, Profile):
        return profile
    if isinstance(profile, bytes) or not isinstance(profile, str | os.PathLike):
        raise InvalidProfileError(
            f"profile must be a planopt.Profile, a bundled profile name or a path to a "
            f"profile file, got {show(profile)}"
        )
    text = os.fspath(profile)
    path = Path(text) if isinstance(text, str) and text and "\0" not in text else None
    if path is not None and path.is_file():
        return load_profile(path)
    names = bundled_profile_names()
    if isinstance(profile, str) and profile in names:
        return bundled_profile(profile)
    if path is not None and (path.exists() or path.suffix or os.sep in text):
        return load_profile(path)  # its error names the file and why it cannot be read
    raise FormatError(
        f"profile must be a profile file or a bundled profile ({', '.join(names)}), "
        f"got {show(text)} (no such file)"
    )
