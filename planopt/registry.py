"""Solver methods as data: name -> where the function lives and what it needs.

Availability is decided from `requires` with `importlib.util.find_spec`, so
listing methods never imports a heavy back-end (OR-Tools, PuLP, torch).
The built-in table is `solvers.METHODS`; `register` adds more at run time.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from planopt.errors import SolverOptionError, SolverUnavailableError, UnknownMethodError


@dataclass(frozen=True)
class MethodSpec:
    """A registered method. `target` is `"module:function"`; the function takes
    a `Problem` and keyword options and returns a `SolverOutput`."""

    name: str
    target: str
    summary: str
    requires: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    exact: bool = False

    def is_available(self) -> bool:
        return all(importlib.util.find_spec(mod) is not None for mod in self.requires)

    def load(self) -> Callable:
        missing = [m for m in self.requires if importlib.util.find_spec(m) is None]
        if missing:
            raise SolverUnavailableError(
                f"method {self.name!r} needs the package(s) {', '.join(missing)}; "
                f"install them (pip install {' '.join(missing)})"
            )
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def options(self) -> list[str]:
        """Names of the keyword options the method accepts."""
        params = list(inspect.signature(self.load()).parameters.values())[1:]
        return [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]

    def check_options(self, options: dict) -> None:
        allowed = self.options()
        for key in options:
            if key not in allowed:
                listing = ", ".join(allowed) if allowed else "none"
                raise SolverOptionError(
                    f"method {self.name!r}: option must be one of {listing}, got {key!r}"
                )


_METHODS: dict[str, MethodSpec] = {}
_ALIASES: dict[str, str] = {}
_loaded_builtins = False


def register(spec: MethodSpec, *, replace: bool = False) -> None:
    """Add a method (and its aliases). Re-registering a name needs `replace=True`."""
    for key in (spec.name, *spec.aliases):
        if not replace and (key in _METHODS or key in _ALIASES):
            raise ValueError(f"method name {key!r} is already registered")
    _METHODS[spec.name] = spec
    for alias in spec.aliases:
        _ALIASES[alias] = spec.name


def _ensure_builtins() -> None:
    global _loaded_builtins
    if not _loaded_builtins:
        _loaded_builtins = True
        from solvers import METHODS

        for spec in METHODS:
            register(spec, replace=True)


def names() -> list[str]:
    """All registered method names (available or not), in registration order."""
    _ensure_builtins()
    return list(_METHODS)


def available() -> list[str]:
    """Registered methods whose required packages are installed."""
    _ensure_builtins()
    return [name for name, spec in _METHODS.items() if spec.is_available()]


def get(name: str) -> MethodSpec:
    """The spec of `name` (or an alias); unknown names list the valid ones."""
    _ensure_builtins()
    key = _ALIASES.get(name, name)
    if key not in _METHODS:
        choices = ", ".join(sorted([*_METHODS, *_ALIASES]))
        raise UnknownMethodError(f"method must be one of {choices}, got {name!r}")
    return _METHODS[key]
