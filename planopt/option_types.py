"""Method options checked against the types the method's signature annotates.

A registered method validates its options' values (ranges, choices); before
it runs, `planopt.solve` checks their kinds here, so `warm_start="x"` or
`threads="2"` is a `SolverOptionError` naming the option, not an
`AttributeError` from inside a solver. Only the annotation forms the methods
use are understood (bool, int, float, str, classes, unions, `Sequence[X]`);
any other form is not checked.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from collections.abc import Callable

from planopt.errors import SolverOptionError, show


def _matches(value: object, hint: object) -> bool | None:
    """Whether `value` is of the annotated type `hint`; None when the form is not known."""
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        answers = [_matches(value, arg) for arg in typing.get_args(hint)]
        return True if any(answers) else (None if None in answers else False)
    if origin is not None and isinstance(origin, type):
        if not isinstance(value, origin) or isinstance(value, str | bytes):
            return False
        args = typing.get_args(hint)
        if origin is collections.abc.Sequence and len(args) == 1:
            answers = [_matches(item, args[0]) for item in value]
            return None if None in answers else all(answers)
        return True
    if isinstance(hint, type):
        return isinstance(value, hint)
    return None


def _describe(hint: object) -> str:
    if hint is type(None):
        return "None"
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        return " or ".join(_describe(arg) for arg in typing.get_args(hint))
    if typing.get_origin(hint) is not None:
        args = ", ".join(_describe(arg) for arg in typing.get_args(hint))
        return f"{typing.get_origin(hint).__name__}[{args}]"
    if isinstance(hint, type):
        module = hint.__module__
        public = module.startswith("planopt") and hint.__name__ in ("Plan", "Profile", "Action")
        return f"planopt.{hint.__name__}" if public else hint.__name__
    return str(hint)


def check_option_types(method: str, fn: Callable, options: dict) -> None:
    """Each option of the method's type, as its signature annotates it.

    The method checks values (ranges, choices) itself; this catches the wrong
    kind of thing (`warm_start="x"`, `threads="2"`) before the method reads
    it, so the user sees the option's name instead of an attribute error
    from inside a solver.
    """
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # a method whose annotations do not resolve: no check
        return
    for key, value in options.items():
        hint = hints.get(key)
        if hint is not None and _matches(value, hint) is False:
            raise SolverOptionError(
                f"method {method!r}: option {key} must be {_describe(hint)}, got {show(value)}"
            )
