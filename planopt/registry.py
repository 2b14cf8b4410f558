"""Solver methods as data: name -> where the function lives, what it decides, what it needs.

Availability is decided from `requires` with `importlib.util.find_spec`, so
listing methods never imports a heavy back-end (OR-Tools, PuLP, torch).
The built-in table is plain data in `solvers.METHODS` (dicts of strings,
so `solvers` never imports this module); `register` adds more at run time.
Everything that needs "the exact methods" or "the oracles" asks here
(`by_role`, `MethodSpec.space`) instead of keeping a list of names.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from planopt.errors import (
    SolverOptionError,
    SolverUnavailableError,
    UnknownMethodError,
    UnsupportedProfileError,
)


class Space(StrEnum):
    """The plans a method chooses among."""

    JOINT = "joint"  # keep, swap and recompute
    RECOMPUTE_ONLY = "recompute-only"  # keep or recompute
    SWAP_ONLY = "swap-only"  # keep or swap
    FIXED = "fixed"  # one plan by rule (a baseline)


SPACE_ACTIONS: dict[Space, frozenset[str]] = {
    Space.JOINT: frozenset({"keep", "swap", "recompute"}),
    Space.RECOMPUTE_ONLY: frozenset({"keep", "recompute"}),
    Space.SWAP_ONLY: frozenset({"keep", "swap"}),
}


def in_space(actions, space: Space | str) -> bool:
    """Whether a plan's actions lie in `space` (a fixed space holds every plan)."""
    allowed = SPACE_ACTIONS.get(Space(space))
    return allowed is None or all(str(a) in allowed for a in actions)


class Menus(StrEnum):
    """What a method does with a profile's menus of partial options (cost model v3)."""

    PLANS = "plans"  # chooses, per kept or swapped layer, the whole layer or an option
    WHOLE = "whole"  # a rule over whole layers: accepts menus, never takes an option
    REFUSES = "refuses"  # does not model options yet: refuses a profile with menus


class Role(StrEnum):
    """What a method promises about its answer."""

    BASELINE = "baseline"  # a published rule: a plan, no promise of quality
    HEURISTIC = "heuristic"  # a search: a fitting plan, no proof
    EXACT = "exact"  # the optimum of its space, proven (or a bound at its limit)
    ORACLE = "oracle"  # exact by enumeration: the tests' reference, tiny nets only
    BOUND = "bound"  # a proven lower bound on the joint optimum, no plan


def load_target(target: str) -> Any:
    """The object named by `"module:attr"` (the one loader every table uses)."""
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"target must be 'module:attr', got {target!r}")
    return getattr(importlib.import_module(module), attr)


def missing_modules(requires: tuple[str, ...]) -> list[str]:
    """The modules of `requires` that are not installed (none imported)."""
    return [m for m in requires if importlib.util.find_spec(m) is None]


@dataclass(frozen=True)
class MethodSpec:
    """A registered method. `target` is `"module:function"`; the function takes
    a `Problem` and keyword options and returns a `SolverOutput`."""

    name: str
    target: str
    summary: str
    space: Space = Space.JOINT
    role: Role = Role.HEURISTIC
    requires: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    # Cheap enough (a few simulations per layer) to give every search and
    # exact method a starting plan: `solvers.search.starts` runs all of them.
    starter: bool = False
    # Cost model v3: what the method does with menus, and whether it models a
    # negative backward scratch (else it refuses such a profile).
    menus: Menus = Menus.REFUSES
    signed_scratch: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "space", Space(self.space))
        object.__setattr__(self, "menus", Menus(self.menus))
        object.__setattr__(self, "role", Role(self.role))
        object.__setattr__(self, "requires", tuple(self.requires))
        object.__setattr__(self, "aliases", tuple(self.aliases))

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> MethodSpec:
        """A spec from one row of a plain-data table (`solvers.METHODS`)."""
        return cls(**data)

    @property
    def exact(self) -> bool:
        """Proves the optimum of its space (exact methods and oracles)."""
        return self.role in (Role.EXACT, Role.ORACLE)

    @property
    def space_label(self) -> str:
        """The plan space in words: `joint`, `joint + options` when it plans over menus."""
        return f"{self.space.value} + options" if self.menus is Menus.PLANS else self.space.value

    def check_profile(self, profile: Any) -> None:
        """Refuse a profile using a cost-model feature this method does not model yet."""
        if profile.has_options and self.menus is Menus.REFUSES:
            count = sum(1 for layer in profile.layers if layer.options)
            able = ", ".join(n for n, spec in _METHODS.items() if spec.menus is Menus.PLANS)
            raise UnsupportedProfileError(
                f"method {self.name!r} does not plan over layer options yet: profile "
                f"{profile.name!r} has a menu on {count} layer(s); methods that do: {able}"
            )
        if not self.signed_scratch:
            for i, layer in enumerate(profile.layers):
                if layer.bwd_work_bytes < 0:
                    able = ", ".join(n for n, spec in _METHODS.items() if spec.signed_scratch)
                    raise UnsupportedProfileError(
                        f"method {self.name!r} does not model a negative backward scratch yet: "
                        f"layer {i} ({layer.name}) has bwd_work_bytes {layer.bwd_work_bytes}; "
                        f"methods that do: {able}"
                    )

    def is_available(self) -> bool:
        return not missing_modules(self.requires)

    def load(self) -> Callable:
        missing = missing_modules(self.requires)
        if missing:
            raise SolverUnavailableError(
                f"method {self.name!r} needs the package(s) {', '.join(missing)}; "
                f"install them (pip install {' '.join(missing)})"
            )
        return load_target(self.target)

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
    _ensure_builtins()
    _add(spec, replace=replace)


def unregister(name: str) -> None:
    """Remove a method added with `register` (tests and plug-ins clean up with this)."""
    spec = get(name)
    del _METHODS[spec.name]
    for alias in spec.aliases:
        _ALIASES.pop(alias, None)


def _add(spec: MethodSpec, *, replace: bool) -> None:
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

        for row in METHODS:
            _add(MethodSpec.from_data(row), replace=True)


def names() -> list[str]:
    """All registered method names (available or not), in registration order."""
    _ensure_builtins()
    return list(_METHODS)


def available() -> list[str]:
    """Registered methods whose required packages are installed."""
    _ensure_builtins()
    return [name for name, spec in _METHODS.items() if spec.is_available()]


def by_role(*roles: Role | str, available_only: bool = True) -> list[str]:
    """Registered methods of the given roles, in registration order."""
    wanted = {Role(r) for r in roles}
    pool = available() if available_only else names()
    return [name for name in pool if _METHODS[name].role in wanted]


def starters() -> list[str]:
    """Available methods cheap enough to seed every search (see `MethodSpec.starter`)."""
    return [name for name in available() if _METHODS[name].starter]


def planners(available_only: bool = True) -> list[str]:
    """Methods that return plans and are fit for a comparison (no oracle, no bound)."""
    return by_role(Role.BASELINE, Role.HEURISTIC, Role.EXACT, available_only=available_only)


def get(name: str) -> MethodSpec:
    """The spec of `name` (or an alias); unknown names list the valid ones."""
    _ensure_builtins()
    key = _ALIASES.get(name, name)
    if key not in _METHODS:
        choices = ", ".join(sorted([*_METHODS, *_ALIASES]))
        raise UnknownMethodError(f"method must be one of {choices}, got {name!r}")
    return _METHODS[key]
