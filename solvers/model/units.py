"""The units every model of `solvers.model` counts in (the policy is stated in its docstring).

`TimeScale` turns seconds into ticks (the plan model) and into linear
units (rows handed to an LP/MIP solver); `MemoryScale` turns bytes into
the memory unit of a model. Nothing else converts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planopt.profile import Profile

# Ticks in the horizon (every duration of the chain serialised).
TIME_RESOLUTION = 10**9
# Linear units in the horizon: a big-M is about this many units, so that an
# integrality tolerance of 1e-9 cannot open holes in a big-M row.
LINEAR_HORIZON = 1.0e4


@dataclass(frozen=True)
class TimeScale:
    """Seconds per tick and the horizon in ticks (with room for rounding up)."""

    unit: float
    horizon: int

    def ticks(self, seconds: float) -> int:
        """`seconds` rounded to the nearest tick; a positive duration to at least one.

        So a tensor lives zero time in the model exactly when it does in the
        spec (and then, by the free-before-allocate rule, occupies nothing).
        """
        return max(1, round(seconds / self.unit)) if seconds > 0 else 0

    def seconds(self, ticks: float) -> float:
        return ticks * self.unit

    @property
    def ticks_per_linear_unit(self) -> float:
        return max(1.0, self.horizon / LINEAR_HORIZON)

    def linear(self, seconds: float) -> float:
        """`seconds` in linear units (continuous time of LP/MIP rows)."""
        return seconds / (self.unit * self.ticks_per_linear_unit)

    def from_linear(self, value: float) -> float:
        """Linear units back to seconds."""
        return value * self.unit * self.ticks_per_linear_unit


def horizon_seconds(profile: Profile) -> float:
    """Every forward (twice: recomputation), backward and copy of the chain, serialised."""
    dev = profile.device
    total = 0.0
    for layer in profile.layers:
        total += 2 * layer.fwd + layer.bwd
        total += dev.d2h_seconds(layer.product_bytes) + dev.h2d_seconds(layer.product_bytes)
    return total


def time_scale(profile: Profile) -> TimeScale:
    """The chain's time scale: `TIME_RESOLUTION` ticks span its horizon."""
    total = horizon_seconds(profile)
    unit = total / TIME_RESOLUTION if total > 0 else 1.0
    return TimeScale(unit, TIME_RESOLUTION + 4 * len(profile.layers) + 4)


@dataclass(frozen=True)
class MemoryScale:
    """Bytes per memory unit of one model."""

    unit: int | float

    def units(self, nbytes: int) -> int | float:
        """`nbytes` in units: an exact integer when the unit is an integer that divides it."""
        return nbytes // self.unit if isinstance(self.unit, int) else nbytes / self.unit

    def capacity(self, budget: float, static_bytes: int) -> float:
        """What the budget leaves for tensors, in units (may be negative)."""
        return (budget - static_bytes) / self.unit


def exact_memory(profile: Profile) -> MemoryScale:
    """The plan model's unit: the gcd of every tensor size, so every size is an
    integer and "fits" means exactly what it means to the simulator."""
    sizes = [
        v
        for layer in profile.layers
        for v in (
            layer.out_bytes,
            layer.saved_bytes,
            layer.input_grad_bytes,
            layer.param_grad_bytes,
            layer.fwd_work_bytes,
            abs(layer.bwd_work_bytes),
            *(o.saved_bytes for o in layer.options),
            *(o.regen_work_bytes for o in layer.options),
        )
        if v > 0
    ]
    return MemoryScale(math.gcd(*sizes) if sizes else 1)


def linear_memory(profile: Profile) -> MemoryScale:
    """The relaxation's unit: the largest saved tensor (coefficients <= 1, capacity O(L))."""
    return MemoryScale(float(max([1, *(layer.product_bytes for layer in profile.layers)])))
