"""The limits of the model's numbers: what a profile may hold so every figure is exact.

Per value (a size, a time, a bandwidth) and per profile (the sum of its
sizes; every positive duration against the longest iteration). The checks
raise `InvalidProfileError` naming the value's place (`what`) and the limit,
which is a named constant here (see the NOTE).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from planopt.errors import InvalidProfileError, show, where

if TYPE_CHECKING:
    from planopt.profile import Device, Layer

# NOTE: a positive time below a picosecond is no measurement, and it breaks
# the model's arithmetic: added to a clock of seconds it vanishes in floating
# point, so an operation "of positive duration" would end as it starts.
MIN_POSITIVE_SECONDS = 1e-12

# NOTE (limits): the largest numbers the model handles exactly.
# Sizes are whole bytes. One value (any layer's byte field, `static_bytes`)
# is at most MAX_BYTES = 2^40 (1 TiB, five times the memory of the largest
# accelerator): beyond it is a unit mistake. The simulator sums sizes in
# int64 (every tensor of every layer: at most 3 copies of a layer's output
# and internals, 2 of its forward scratch, its gradients and backward
# scratch), the exact solvers and JSON readers in float64: so a profile's
# sizes together (static plus every byte field of every layer) are at most
# MAX_TOTAL_BYTES = 2^53, where every sum is exact in both (and 11 times it
# is still far below 2^63). Per value alone this cannot be had for long
# chains: 10^7 layers of 1 TiB would be 2^63 several times over; a real
# chain of 10^7 layers holds a few MB each, 10^13 bytes in all.
# Times are float seconds: one value (fwd, bwd, the latency, a layer's copy)
# is at most MAX_SECONDS = 10^6 (11 days; a layer's pass taking longer is a
# unit mistake), so the longest iteration of even 10^7 layers (every layer
# forward twice, backward once, copied out and back: 5 * 10^13 s) is finite
# with room to spare. A finite bandwidth is at most MAX_BANDWIDTH = 10^18
# bytes/s (+inf is the ideal link). Finite is not enough for the clock: a
# duration added to a clock of 2^53 times its length vanishes, and a
# forward that ends as it starts frees before the next allocates (the
# `fwd: 1e308` profile's wrong keep-all peak). So every positive duration is
# at least the longest possible iteration / MAX_SPAN_RATIO (2^50: a margin
# of 4 over the last bit), and stays positive on any clock the model runs.
MAX_BYTES = 2**40
MAX_TOTAL_BYTES = 2**53
MAX_SECONDS = 1e6
MAX_BANDWIDTH = 1e18
MAX_SPAN_RATIO = 2**50


def check_seconds(value: Any, what: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidProfileError(f"{what} must be a number of seconds, got {show(value)}")
    # Compared before any conversion: an int beyond a float's range compares exactly.
    if value != value or value < 0 or (positive and value == 0):
        rule = "> 0" if positive else ">= 0"
        raise InvalidProfileError(f"{what} must be finite and {rule}, got {show(value)}")
    if value > MAX_SECONDS:
        raise InvalidProfileError(
            f"{what} must be at most {MAX_SECONDS:g} s (planopt.limits.MAX_SECONDS), "
            f"got {show(value)}"
        )
    if 0 < value < MIN_POSITIVE_SECONDS:
        raise InvalidProfileError(
            f"{what} must be 0 or at least {MIN_POSITIVE_SECONDS:g} s, got {value!r}"
        )
    return float(value)


def check_bytes(value: Any, what: str) -> int:
    """A whole number of bytes in [0, MAX_BYTES]; errors name `what` and the rule."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidProfileError(f"{what} must be an integer number of bytes, got {show(value)}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise InvalidProfileError(f"{what} must be an integer number of bytes, got {value!r}")
    if value < 0:
        raise InvalidProfileError(f"{what} must be >= 0, got {show(value)}")
    if value > MAX_BYTES:
        raise InvalidProfileError(
            f"{what} must be at most {MAX_BYTES} bytes (2^40, 1 TiB: "
            f"planopt.limits.MAX_BYTES), got {show(value)}"
        )
    return int(value)


def check_bandwidth(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidProfileError(f"{what} must be a number of bytes/s, got {show(value)}")
    # NOTE: +inf is allowed (an ideal link: copies cost only the latency); it
    # is what the "infinite bandwidth costs nothing" properties are stated with.
    if value != value or value <= 0:
        raise InvalidProfileError(f"{what} must be > 0, got {show(value)}")
    if value != math.inf and value > MAX_BANDWIDTH:
        raise InvalidProfileError(
            f"{what} must be at most {MAX_BANDWIDTH:g} bytes/s (or inf, an ideal link; "
            f"planopt.limits.MAX_BANDWIDTH), got {show(value)}"
        )
    return float(value)


_BYTE_FIELDS = (
    "out_bytes",
    "saved_bytes",
    "input_grad_bytes",
    "param_grad_bytes",
    "fwd_work_bytes",
    "bwd_work_bytes",
)


def check_total_bytes(static: int, layers: Sequence[Layer]) -> None:
    """Static plus every byte field of every layer within MAX_TOTAL_BYTES (see the NOTE)."""
    # abs: version 3's backward scratch may be negative; a regeneration's scratch
    # exists at most once per layer at a time (its largest option's).
    total = static + sum(abs(getattr(layer, f)) for layer in layers for f in _BYTE_FIELDS)
    total += sum(max((o.regen_work_bytes for o in layer.options), default=0) for layer in layers)
    if total > MAX_TOTAL_BYTES:
        raise InvalidProfileError(
            f"profile: its sizes (static_bytes and every layer's byte fields) must sum to at "
            f"most {MAX_TOTAL_BYTES} bytes (2^53: planopt.limits.MAX_TOTAL_BYTES), got {total}"
        )


def check_clock(device: Device, layers: Sequence[Layer]) -> None:
    """Every copy within MAX_SECONDS, every positive duration above the clock's resolution.

    The longest iteration any plan can take is at most every forward twice
    (once more in a recompute), every backward, and every layer's copy out
    and back; a duration below it / MAX_SPAN_RATIO would vanish on the clock.
    The place of the shortest duration is kept as `(layer, what)` and put
    into words only for the error (this runs on every profile made).
    """
    latency = device.transfer_latency
    span = 0.0
    shortest, place = math.inf, (-1, "")
    if latency > 0:
        shortest = latency
    for i, layer in enumerate(layers):
        span += 2 * layer.fwd + layer.bwd
        if 0 < layer.fwd < shortest:
            shortest, place = layer.fwd, (i, "fwd")
        if 0 < layer.bwd < shortest:
            shortest, place = layer.bwd, (i, "bwd")
        nbytes = layer.out_bytes + layer.saved_bytes
        for attr in ("d2h_bandwidth", "h2d_bandwidth"):
            bandwidth = getattr(device, attr)
            longest = latency + nbytes / bandwidth
            if longest > MAX_SECONDS:
                raise InvalidProfileError(
                    f"{where(i, layer.name)}: a copy must take at most {MAX_SECONDS:g} s "
                    f"(planopt.limits.MAX_SECONDS), got {longest:.3g} s for its {nbytes} bytes "
                    f"at device {attr} {bandwidth:g} bytes/s"
                )
            span += longest
            # The shortest copy of the layer: its internals alone, else with its output.
            least = latency + (layer.saved_bytes or nbytes) / bandwidth
            if 0 < least < shortest:
                shortest, place = least, (i, attr)
    if shortest * MAX_SPAN_RATIO >= span:
        return
    index, what = place
    if index < 0:
        subject = "device: transfer_latency"
    elif what in ("fwd", "bwd"):
        subject = f"{where(index, layers[index].name)}: {what}"
    else:
        subject = (
            f"{where(index, layers[index].name)}: a copy (its bytes at device {what} "
            f"{getattr(device, what):g} bytes/s)"
        )
    raise InvalidProfileError(
        f"{subject} must take at least 2^-50 of the longest iteration any plan can take "
        f"({span:.6g} s: every forward twice, every backward and copy), "
        f"{span / MAX_SPAN_RATIO:.3g} s, or it vanishes on the simulator's clock "
        f"(planopt.limits.MAX_SPAN_RATIO); got {shortest!r} s"
    )
