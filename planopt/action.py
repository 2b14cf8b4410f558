"""The three actions a plan gives a layer (spec: "The plan")."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from planopt.errors import InvalidPlanError, show, where


class Action(StrEnum):
    """What happens to a layer's saved tensor between forward and backward."""

    KEEP = "keep"
    SWAP = "swap"
    RECOMPUTE = "recompute"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _missing_(cls, value: object) -> Action:
        choices = ", ".join(a.value for a in cls)
        raise InvalidPlanError(f"action must be one of {choices}, got {show(value)}")


KEEP, SWAP, RECOMPUTE = Action.KEEP, Action.SWAP, Action.RECOMPUTE


def parse_action(value: Any, index: int, name: str | None = None) -> Action:
    """An `Action` from an enum member or its string; errors name the layer."""
    if isinstance(value, Action):
        return value
    try:
        return Action(value)
    except (ValueError, TypeError):  # TypeError: an unhashable value
        choices = ", ".join(a.value for a in Action)
        raise InvalidPlanError(
            f"{where(index, name)}: action must be one of {choices}, got {show(value)}"
        ) from None
