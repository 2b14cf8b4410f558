"""One exception hierarchy for everything a user can get wrong.

Every message states the rule, then the value, then where (layer index and
name, field), so a user can fix the input without reading our code.
"""

from __future__ import annotations


class PlanoptError(Exception):
    """Base of every error planopt raises on purpose."""


class InvalidProfileError(PlanoptError, ValueError):
    """A profile breaks the spec (missing field, negative time, zero bandwidth...)."""


class InvalidPlanError(PlanoptError, ValueError):
    """A plan breaks the spec or does not fit the profile it is applied to."""


class ProfileMismatchError(InvalidPlanError):
    """A plan was made for another profile (its fingerprint differs)."""


class FormatError(PlanoptError, ValueError):
    """A file is not parseable JSON or not of the expected `format`."""


class OutputPathError(PlanoptError, ValueError):
    """An output path cannot be written: a missing folder, a folder as the file, no access."""


class BudgetError(PlanoptError, ValueError):
    """A budget is malformed or below what any plan can meet."""

    def __init__(self, message: str, minimum: int | None = None) -> None:
        super().__init__(message)
        self.minimum = minimum


class UnknownMethodError(PlanoptError, ValueError):
    """No solver method is registered under that name."""


class SolverUnavailableError(PlanoptError, RuntimeError):
    """A registered method needs a package that is not installed."""


class SolverCrashError(PlanoptError, RuntimeError):
    """A back-end died (an abort inside its native code) instead of answering."""


class UnsupportedProfileError(PlanoptError, ValueError):
    """A method cannot plan this profile (a cost-model feature it does not model yet)."""


class SolverOptionError(PlanoptError, ValueError):
    """A solver option is unknown or out of range (time limit, backend...)."""


def show(value: object, limit: int = 80) -> str:
    """`repr(value)` for a message, never failing and never huge.

    A huge integer is shown by its magnitude (`repr` of one beyond 4300
    digits raises), and a long repr is cut: a message names the value, it
    does not echo a file back.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"{'-' if value < 0 else ''}an integer of about 2^{value.bit_length() - 1}"
    try:
        text = repr(value)
    except (RecursionError, ValueError):
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def where(index: int, name: str | None) -> str:
    """The 'layer 3 (conv2)' prefix every per-layer message starts with."""
    return f"layer {index} ({name})" if name else f"layer {index}"
