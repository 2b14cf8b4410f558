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


# -- options from text (the command line's `--option NAME=VALUE`) ----------------------

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def _from_text(text: str, hint: object) -> tuple[bool, object]:
    """`(parsed, value)`: `text` read as the annotated type `hint` (unions in order)."""
    if hint is type(None):
        return (True, None) if text.lower() in ("none", "null") else (False, None)
    if hint is bool:
        low = text.lower()
        return (True, low in _TRUE) if low in _TRUE + _FALSE else (False, None)
    if hint is int or hint is float:
        try:
            return True, hint(text)
        except ValueError:
            return False, None
    if hint is str:
        return True, text
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        args = typing.get_args(hint)
        # None first, then the narrower kinds: "none" is None, "3" an int, "3.5" a float.
        order = {type(None): 0, bool: 1, int: 2, float: 3}
        for arg in sorted(args, key=lambda a: order.get(a, 4)):
            parsed, value = _from_text(text, arg)
            if parsed:
                return True, value
        return False, None
    if isinstance(hint, type) and hint.__name__ == "Plan" and hint.__module__ == "planopt.plan":
        from planopt.io import load_plan

        return True, load_plan(text)  # a plan file; its errors name the file
    return False, None


def _settable(hint: object) -> bool:
    """Whether `_from_text` can make a value of `hint` from text."""
    if hint in (type(None), bool, int, float, str):
        return True
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        return all(_settable(arg) for arg in typing.get_args(hint))
    return isinstance(hint, type) and hint.__name__ == "Plan" and hint.__module__ == "planopt.plan"


def parse_options(method: str, fn: Callable, allowed: list[str], texts: list[str]) -> dict:
    """Options of `method` from `NAME=VALUE` texts, each value read as its annotation says.

    Booleans are true/false (yes/no, on/off, 1/0), `none` is None where the
    option allows it, and an option taking a `planopt.Plan` takes a plan file.
    Unknown names list the method's options; ranges and choices stay the
    method's own checks (through `planopt.solve`), as from the API.
    """
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # annotations that do not resolve: every value stays text
        hints = {}
    options: dict = {}
    for text in texts:
        name, sep, raw = text.partition("=")
        name = name.strip()
        if not sep or not name:
            raise SolverOptionError(f"--option must be NAME=VALUE, got {text!r}")
        if name not in allowed:
            listing = ", ".join(allowed) if allowed else "none"
            raise SolverOptionError(
                f"method {method!r}: --option must name one of its options ({listing}), "
                f"got {name!r}"
            )
        if name in options:
            raise SolverOptionError(f"--option {name} must be given once, got it twice")
        hint = hints.get(name, str)
        if not _settable(hint):
            raise SolverOptionError(
                f"method {method!r}: option {name} takes {_describe(hint)}, which the "
                f"command line cannot give; pass it to planopt.solve"
            )
        parsed, value = _from_text(raw.strip(), hint)
        if not parsed:
            raise SolverOptionError(
                f"method {method!r}: option {name} must be {_describe(hint)}, got {raw!r}"
            )
        options[name] = value
    return options
