"""A layer's menu of partial options (cost model v3: "Partial layers").

An option says which of a layer's internals stay from `F_i` to `B_i`
(`saved_bytes`, h_k) and what re-running the rest before `B_i` costs
(`recompute`, r_k). It lives apart from `planopt.profile` so that module stays
the chain's shape; `planopt.profile` re-exports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from planopt.errors import InvalidProfileError, show
from planopt.limits import MAX_BYTES, check_bytes, check_seconds

# The names a plan could mean "no option" or "every option" by: never an option's.
RESERVED_OPTION_NAMES = ("all", "none")


@dataclass(frozen=True, slots=True)
class LayerOption:
    """One entry of a layer's menu: keep `saved_bytes` of its internals, regenerate the rest.

    `policy` holds the positions (0-based, in forward dispatch order) of the
    aten ops whose outputs are saved; the runtime applies it through torch's
    selective checkpointing. The planner only reads the numbers.
    `regen_work_bytes` is scratch that exists only while the regeneration runs.
    """

    name: str
    saved_bytes: int
    recompute: float
    policy: tuple[int, ...] = ()
    regen_work_bytes: int = 0

    def validated(self, at: str, layer_saved: int) -> LayerOption:
        """A copy with numbers normalised; errors start with `at` (the layer and option)."""
        if not isinstance(self.name, str) or not self.name:
            raise InvalidProfileError(
                f"{at}: name must be a non-empty string, got {show(self.name)}"
            )
        if self.name in RESERVED_OPTION_NAMES:
            raise InvalidProfileError(
                f"{at}: name must not be one of the reserved names "
                f"{', '.join(RESERVED_OPTION_NAMES)}, got {self.name!r}"
            )
        saved = check_bytes(self.saved_bytes, f"{at}: saved_bytes")
        if saved > layer_saved:
            raise InvalidProfileError(
                f"{at}: saved_bytes must be at most the layer's saved_bytes ({layer_saved}), "
                f"got {saved}"
            )
        return LayerOption(
            name=self.name,
            saved_bytes=saved,
            recompute=check_seconds(self.recompute, f"{at}: recompute"),
            policy=_check_policy(self.policy, f"{at}: policy"),
            regen_work_bytes=check_bytes(self.regen_work_bytes, f"{at}: regen_work_bytes"),
        )


def _check_policy(value: Any, what: str) -> tuple[int, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise InvalidProfileError(
            f"{what} must be a list of operator positions (integers >= 0), got {show(value)}"
        )
    seen: set[int] = set()
    for position in value:
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise InvalidProfileError(
                f"{what} must hold integer operator positions >= 0, got {show(position)}"
            )
        if position in seen:
            raise InvalidProfileError(f"{what} must not repeat a position, got {position} twice")
        seen.add(position)
    return tuple(int(p) for p in value)


def check_options(value: Any, at: str, layer_saved: int) -> tuple[LayerOption, ...]:
    """A layer's menu validated: a sequence of `LayerOption` with unique names."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise InvalidProfileError(
            f"{at}: options must be a sequence of LayerOption, got {show(value)}"
        )
    out: list[LayerOption] = []
    names: set[str] = set()
    for k, option in enumerate(value):
        if not isinstance(option, LayerOption):
            raise InvalidProfileError(f"{at}: option {k} must be a LayerOption, got {show(option)}")
        name = option.name if isinstance(option.name, str) else None
        label = f"{at}: option {k}" + (f" ({name})" if name else "")
        checked = option.validated(label, layer_saved)
        if checked.name in names:
            raise InvalidProfileError(
                f"{at}: option names must be unique within the layer, got {checked.name!r} twice"
            )
        names.add(checked.name)
        out.append(checked)
    return tuple(out)


def check_signed_bytes(value: Any, what: str) -> int:
    """A whole number of bytes in [-MAX_BYTES, MAX_BYTES] (v3's signed backward scratch)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidProfileError(f"{what} must be an integer number of bytes, got {show(value)}")
    if isinstance(value, int | float) and value < 0 and value >= -MAX_BYTES:
        return -check_bytes(-value, what)
    if isinstance(value, int | float) and value < -MAX_BYTES:
        raise InvalidProfileError(
            f"{what} must be at least -{MAX_BYTES} bytes (-2^40: planopt.limits.MAX_BYTES), "
            f"got {show(value)}"
        )
    return check_bytes(value, what)


def option_index(options: Sequence[LayerOption], name: str) -> int | None:
    """Position of the option called `name` in a menu, None if there is none."""
    for k, option in enumerate(options):
        if option.name == name:
            return k
    return None


__all__ = ["RESERVED_OPTION_NAMES", "LayerOption", "check_options", "option_index"]
