"""The measured network: a chain of layers on a device (spec: "The network").

`Profile`, `Layer` and `Device` are frozen and validate on construction, so a
malformed profile never reaches the simulator or a solver.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from planopt.errors import InvalidProfileError, show, where
from planopt.limits import (
    check_bandwidth,
    check_bytes,
    check_clock,
    check_seconds,
    check_total_bytes,
)
from planopt.menu import LayerOption, check_options, check_signed_bytes


@dataclass(frozen=True, slots=True)
class Device:
    """Host link of the accelerator: copy bandwidths (bytes/s) and per-copy latency (s)."""

    name: str
    h2d_bandwidth: float
    d2h_bandwidth: float
    transfer_latency: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise InvalidProfileError(f"device: name must be a string, got {show(self.name)}")
        for attr in ("h2d_bandwidth", "d2h_bandwidth"):
            object.__setattr__(self, attr, check_bandwidth(getattr(self, attr), f"device: {attr}"))
        object.__setattr__(
            self,
            "transfer_latency",
            check_seconds(self.transfer_latency, "device: transfer_latency"),
        )

    def d2h_seconds(self, nbytes: int) -> float:
        """Duration of one copy out of `nbytes` (latency + size / bandwidth)."""
        return self.transfer_latency + nbytes / self.d2h_bandwidth

    def h2d_seconds(self, nbytes: int) -> float:
        """Duration of one copy back of `nbytes`."""
        return self.transfer_latency + nbytes / self.h2d_bandwidth


def _check_flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidProfileError(f"{what} must be true or false, got {show(value)}")
    return value


@dataclass(frozen=True, slots=True)
class Layer:
    """One element of the chain (spec v2: "The network").

    Its products are its output `x_{i+1}` (`out_bytes`) and its internals
    (`saved_bytes`, what `F_i` creates and `B_i` reads besides its input and
    output). `saves_input`/`saves_output` say which of `x_i`, `x_{i+1}` its
    backward reads; `input_grad_bytes` is the gradient of `x_i` that `B_i`
    writes and `param_grad_bytes` the parameter gradients it first
    allocates. `Layer.v1(...)` builds the version-1 reading of one number.
    Version 3 adds `options` (the layer's menu of partial options) and lets
    `bwd_work_bytes` be negative, down to the floor `Profile` checks.
    `modifies_input`: the forward changes `x_i` in place (a block that starts
    with `ReLU(inplace=True)`); it restricts the runnable plans
    (`planopt.runnable`, cost model "The in-place rule"). False by default, so
    every existing profile means what it meant.
    """

    name: str
    fwd: float
    bwd: float
    out_bytes: int
    saved_bytes: int = 0
    saves_input: bool = False
    saves_output: bool = False
    input_grad_bytes: int = 0
    param_grad_bytes: int = 0
    fwd_work_bytes: int = 0
    bwd_work_bytes: int = 0
    signature: str | None = None
    options: tuple[LayerOption, ...] = ()
    modifies_input: bool = False

    @classmethod
    def v1(
        cls,
        name: str,
        fwd: float,
        bwd: float,
        saved_bytes: int,
        fwd_work_bytes: int = 0,
        bwd_work_bytes: int = 0,
        signature: str | None = None,
    ) -> Layer:
        """A version-1 layer, read as the spec says: its one saved tensor is its
        output, read by its own backward (`saves_output`), no gradients."""
        return cls(
            name=name,
            fwd=fwd,
            bwd=bwd,
            out_bytes=saved_bytes,
            saves_output=True,
            fwd_work_bytes=fwd_work_bytes,
            bwd_work_bytes=bwd_work_bytes,
            signature=signature,
        )

    @property
    def is_v1(self) -> bool:
        """Whether this layer is the version-1 reading of one saved size."""
        return (
            self.saved_bytes == 0
            and not self.options
            and self.bwd_work_bytes >= 0
            and self.saves_output
            and not self.saves_input
            and not self.modifies_input
            and self.input_grad_bytes == 0
            and self.param_grad_bytes == 0
        )

    @property
    def is_v3(self) -> bool:
        """Whether this layer uses a version-3 feature: a menu or a negative scratch."""
        return bool(self.options) or self.bwd_work_bytes < 0

    @property
    def product_bytes(self) -> int:
        """Output plus internals: what the layer's forward leaves behind."""
        return self.out_bytes + self.saved_bytes

    def validated(self, index: int) -> Layer:
        """A copy with numbers normalised; errors name `index` and the field."""
        at = where(index, self.name if isinstance(self.name, str) else None)
        if not isinstance(self.name, str) or not self.name:
            raise InvalidProfileError(
                f"{at}: name must be a non-empty string, got {show(self.name)}"
            )
        if self.signature is not None and not isinstance(self.signature, str):
            raise InvalidProfileError(
                f"{at}: signature must be a string or null, got {show(self.signature)}"
            )
        input_grad = check_bytes(self.input_grad_bytes, f"{at}: input_grad_bytes")
        if index == 0 and input_grad:
            raise InvalidProfileError(
                f"{at}: input_grad_bytes must be 0 for layer 0 (its input is the batch), "
                f"got {input_grad}"
            )
        saved = check_bytes(self.saved_bytes, f"{at}: saved_bytes")
        return Layer(
            name=self.name,
            fwd=check_seconds(self.fwd, f"{at}: fwd"),
            bwd=check_seconds(self.bwd, f"{at}: bwd"),
            out_bytes=check_bytes(self.out_bytes, f"{at}: out_bytes"),
            saved_bytes=saved,
            saves_input=_check_flag(self.saves_input, f"{at}: saves_input"),
            saves_output=_check_flag(self.saves_output, f"{at}: saves_output"),
            input_grad_bytes=input_grad,
            param_grad_bytes=check_bytes(self.param_grad_bytes, f"{at}: param_grad_bytes"),
            fwd_work_bytes=check_bytes(self.fwd_work_bytes, f"{at}: fwd_work_bytes"),
            bwd_work_bytes=check_signed_bytes(self.bwd_work_bytes, f"{at}: bwd_work_bytes"),
            signature=self.signature,
            options=check_options(self.options, at, saved),
            modifies_input=_check_flag(self.modifies_input, f"{at}: modifies_input"),
        )


def backward_frees(layers: tuple[Layer, ...], i: int) -> int:
    """Bytes every plan frees at the end of `B_i`: the floor of its scratch is minus this.

    The incoming gradient `g_{i+1}`, layer i's internals (kept, copied back,
    regenerated or partly each: all freed there), its output when `B_i`
    reads it, and its input when `B_i` reads it and `B_{i-1}` does not
    (cost model v3, "Signed backward scratch"). Only the profile's flags
    count: an option makes `B_i` the input's last reader in some plans, which
    frees more, never less.
    """
    layer = layers[i]
    freed = layer.saved_bytes + (layer.out_bytes if layer.saves_output else 0)
    if i + 1 < len(layers):
        freed += layers[i + 1].input_grad_bytes
    if i > 0 and layer.saves_input and not layers[i - 1].saves_output:
        freed += layers[i - 1].out_bytes
    return freed


def with_signed_scratch(layers: Sequence[Layer], release: Sequence[int]) -> list[Layer]:
    """`layers` with each backward's scratch signed: minus the measured `release[i]`
    (what that backward frees before its allocations peak), down to v3's floor
    (`backward_frees`); layers with a scratch or no release are left as they are."""
    layers = tuple(layers)
    return [
        dataclasses.replace(layer, bwd_work_bytes=-min(release[i], backward_frees(layers, i)))
        if release[i] and not layer.bwd_work_bytes
        else layer
        for i, layer in enumerate(layers)
    ]


def _check_scratch_floor(layers: tuple[Layer, ...]) -> None:
    for i, layer in enumerate(layers):
        if layer.bwd_work_bytes < 0:
            floor = backward_frees(layers, i)
            if -layer.bwd_work_bytes > floor:
                raise InvalidProfileError(
                    f"{where(i, layer.name)}: bwd_work_bytes must be at least -{floor} "
                    f"(minus what B_{i} frees at its end: the incoming gradient and the "
                    f"products whose last reader is B_{i}), got {layer.bwd_work_bytes}"
                )


def _check_unique_names(layers: tuple[Layer, ...]) -> None:
    """Refuse two layers of one name: a plan names its layers (`Plan.names`, plan
    files), so a name must say which layer it is."""
    seen: dict[str, int] = {}
    for i, layer in enumerate(layers):
        first = seen.setdefault(layer.name, i)
        if first != i:
            raise InvalidProfileError(
                f"{where(i, layer.name)}: name must be unique in the profile (a plan names "
                f"its layers), got the name of layer {first}"
            )


@dataclass(frozen=True)
class Profile:
    """A layer chain with its static memory and device (spec: "The network")."""

    name: str
    device: Device
    static_bytes: int
    layers: tuple[Layer, ...]
    source: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise InvalidProfileError(f"profile: name must be a string, got {show(self.name)}")
        if not isinstance(self.device, Device):
            raise InvalidProfileError(f"profile: device must be a Device, got {show(self.device)}")
        object.__setattr__(
            self, "static_bytes", check_bytes(self.static_bytes, "profile: static_bytes")
        )
        if isinstance(self.layers, str | bytes) or not hasattr(self.layers, "__iter__"):
            raise InvalidProfileError(
                f"profile: layers must be a sequence of Layer, got {show(self.layers)}"
            )
        layers = tuple(self.layers)
        if not layers:
            raise InvalidProfileError("profile: layers must hold at least one layer, got 0")
        for i, layer in enumerate(layers):
            if not isinstance(layer, Layer):
                raise InvalidProfileError(f"layer {i}: must be a Layer, got {show(layer)}")
        checked = tuple(layer.validated(i) for i, layer in enumerate(layers))
        _check_scratch_floor(checked)
        _check_unique_names(checked)
        object.__setattr__(self, "layers", checked)
        if self.source is not None and not isinstance(self.source, str):
            raise InvalidProfileError(f"profile: source must be a string, got {show(self.source)}")
        check_total_bytes(self.static_bytes, checked)
        check_clock(self.device, checked)

    def __len__(self) -> int:
        return len(self.layers)

    @property
    def t_ideal(self) -> float:
        """Keep-all makespan without a memory limit: no plan is faster (spec).

        Summed in the compute stream's own order (forwards up, backwards
        down), so the simulated keep-all makespan equals it to the last bit.
        """
        total = 0.0
        for layer in self.layers:
            total += layer.fwd
        for layer in reversed(self.layers):
            total += layer.bwd
        return total

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(layer.name for layer in self.layers)

    @cached_property
    def is_v1(self) -> bool:
        """Whether every layer is the version-1 reading of one saved size (see `Layer.v1`)."""
        return all(layer.is_v1 for layer in self.layers)

    @cached_property
    def is_v3(self) -> bool:
        """Whether any layer has a menu of options or a negative backward scratch."""
        return any(layer.is_v3 for layer in self.layers)

    @cached_property
    def modifies_inputs(self) -> bool:
        """Whether any layer modifies its input in place (the in-place rule applies)."""
        return any(layer.modifies_input for layer in self.layers)

    @cached_property
    def has_options(self) -> bool:
        """Whether any layer has a menu of partial options."""
        return any(layer.options for layer in self.layers)

    @cached_property
    def fingerprint(self) -> str:
        """Hash of everything that changes a plan's meaning or cost.

        The profile's own `name` and `source` are metadata and left out, so a
        renamed copy of the same measurements accepts the same plans. A
        profile that is the version-1 reading of one saved size per layer
        hashes exactly as version 1 did, so plans saved then stay valid; one
        without menus hashes as version 2 did (a negative scratch changes
        the hash through its value), and menus enter under their own key.
        """
        payload: dict[str, Any] = {
            "device": [
                self.device.h2d_bandwidth,
                self.device.d2h_bandwidth,
                self.device.transfer_latency,
            ],
            "static_bytes": self.static_bytes,
            "layers": [
                [
                    layer.name,
                    layer.fwd,
                    layer.bwd,
                    layer.out_bytes if self.is_v1 else layer.saved_bytes,
                    layer.fwd_work_bytes,
                    layer.bwd_work_bytes,
                ]
                for layer in self.layers
            ],
        }
        if not self.is_v1:
            payload["v2"] = [
                [
                    layer.out_bytes,
                    layer.saves_input,
                    layer.saves_output,
                    layer.input_grad_bytes,
                    layer.param_grad_bytes,
                ]
                for layer in self.layers
            ]
        if self.has_options:
            payload["v3"] = [
                [
                    [o.name, o.saved_bytes, o.recompute, list(o.policy), o.regen_work_bytes]
                    for o in layer.options
                ]
                for layer in self.layers
            ]
        if self.modifies_inputs:  # it changes which plans run (the in-place rule)
            payload["modifies_input"] = [layer.modifies_input for layer in self.layers]
        text = json.dumps(payload, separators=(",", ":"), allow_nan=True)
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:32]

    def replace_layers(self, layers: tuple[Layer, ...] | list[Layer], **changes: Any) -> Profile:
        """A new profile with other layers (and optionally other fields)."""
        return Profile(
            name=changes.get("name", self.name),
            device=changes.get("device", self.device),
            static_bytes=changes.get("static_bytes", self.static_bytes),
            layers=tuple(layers),
            source=changes.get("source", self.source),
        )
