"""Versioned JSON formats: `planopt.profile/3` (/2, /1), `planopt.plan/2` (/1) (spec: 8).

Parsing checks the shape of the document (missing, unknown or mistyped
fields) and names the layer and field; the dataclasses then check values.
A `planopt.profile/1` document is read as the spec's version-1 reading
(`Layer.v1`: its one saved size is the layer's output, read by its own
backward). Writers emit the oldest version that holds the data, so older
readers keep working: a profile without menus or negative scratch as /2,
else /3; a plan without options as `planopt.plan/1`, else /2. A layer's
optional `modifies_input` (/2 and /3, written only when true) says its
forward changes its input in place (the in-place rule, `planopt.runnable`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from planopt.errors import FormatError, InvalidPlanError, InvalidProfileError, show, where
from planopt.paths import write_text
from planopt.plan import SWAP, Plan, parse_action
from planopt.profile import Device, Layer, LayerOption, Profile, check_bytes

PROFILE_FORMAT = "planopt.profile/2"
PROFILE_FORMAT_V1 = "planopt.profile/1"
PROFILE_FORMAT_V3 = "planopt.profile/3"
PLAN_FORMAT = "planopt.plan/1"
PLAN_FORMAT_V2 = "planopt.plan/2"

_LAYER_REQUIRED = ("name", "fwd", "bwd", "out_bytes")
_LAYER_OPTIONAL = (
    "saved_bytes",
    "saves_input",
    "saves_output",
    "input_grad_bytes",
    "param_grad_bytes",
    "fwd_work_bytes",
    "bwd_work_bytes",
    "signature",
    "modifies_input",
)
_V3_LAYER_OPTIONAL = (*_LAYER_OPTIONAL, "options")
_OPTION_REQUIRED = ("name", "saved_bytes", "recompute")
_OPTION_OPTIONAL = ("policy", "regen_work_bytes")
_V1_LAYER_REQUIRED = ("name", "fwd", "bwd", "saved_bytes")
_V1_LAYER_OPTIONAL = ("fwd_work_bytes", "bwd_work_bytes", "signature")
_DEVICE_REQUIRED = ("h2d_bandwidth", "d2h_bandwidth")
_DEVICE_OPTIONAL = ("name", "transfer_latency")
_PLAN_LAYER_FIELDS = ("name", "action", "prefetch_at", "swap_wait")


def _read_json(source: str | os.PathLike | dict, kind: str) -> dict:
    """The JSON object of a file (or `source` itself when already a dict).

    Every way a file can be unreadable (missing, a folder, not UTF-8, not
    JSON, a number too long for Python, nesting too deep) is a `FormatError`
    naming the file and why.
    """
    if isinstance(source, dict):
        return source
    if isinstance(source, bytes) or not isinstance(source, str | os.PathLike):
        raise FormatError(
            f"{kind} must be a path to a {kind} file or an already parsed dict, got {show(source)}"
        )
    name = os.fspath(source)
    if not isinstance(name, str) or not name or "\0" in name:
        raise FormatError(f"{kind} file must be a non-empty path without NUL, got {show(source)}")
    path = Path(name)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise FormatError(f"{kind} file {name!r}: cannot be read ({reason})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(
            f"{kind} file {name!r}: must be UTF-8 text (JSON), got byte "
            f"{raw[exc.start]:#04x} at offset {exc.start}"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(
            f"{kind} file {name!r}: must be valid JSON, got an error at line {exc.lineno} "
            f"column {exc.colno}: {exc.msg}"
        ) from None
    except (ValueError, RecursionError) as exc:
        # Python's own limits: an integer of over 4300 digits, nesting beyond the stack.
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]
        raise FormatError(
            f"{kind} file {name!r}: must be JSON planopt can read, got {why}"
        ) from None
    if not isinstance(data, dict):
        raise FormatError(
            f"{kind} file {name!r}: must hold a JSON object, got {type(data).__name__}"
        )
    return data


def _check_format(data: dict, *expected: str) -> str:
    got = data.get("format")
    if not isinstance(got, str) or got not in expected:
        kind = expected[0].split("/")[0].split(".")[1]
        choices = " or ".join(repr(e) for e in expected)
        raise FormatError(f"{kind}: format must be {choices}, got {show(got)}")
    return got


def _check_keys(
    obj: Any, required: tuple, optional: tuple, at: str, error: type[Exception]
) -> None:
    if not isinstance(obj, dict):
        raise error(f"{at}: must be a JSON object, got {type(obj).__name__}")
    for key in required:
        if key not in obj:
            raise error(f"{at}: field {key!r} is required")
    unknown = [key for key in obj if key not in required and key not in optional]
    if unknown:
        first = min(unknown, key=lambda key: (not isinstance(key, str), str(key)))
        raise error(
            f"{at}: unknown field {show(first)} (allowed: {', '.join(required + optional)})"
        )


# -- profile -------------------------------------------------------------------


def _options(raw: dict, at: str) -> tuple[LayerOption, ...]:
    """A `/3` layer's menu: the shape of each entry checked, values left to `LayerOption`."""
    menu = raw.get("options", [])
    if not isinstance(menu, list):
        raise InvalidProfileError(f"{at}: options must be a list, got {type(menu).__name__}")
    out = []
    for k, entry in enumerate(menu):
        name = entry.get("name") if isinstance(entry, dict) else None
        here = f"{at}: option {k}" + (f" ({name})" if isinstance(name, str) and name else "")
        _check_keys(entry, _OPTION_REQUIRED, _OPTION_OPTIONAL, here, InvalidProfileError)
        policy = entry.get("policy", [])
        if not isinstance(policy, list):
            raise InvalidProfileError(
                f"{here}: policy must be a list of operator positions, got {show(policy)}"
            )
        out.append(
            LayerOption(
                name=entry["name"],
                saved_bytes=entry["saved_bytes"],
                recompute=entry["recompute"],
                policy=tuple(policy),
                regen_work_bytes=entry.get("regen_work_bytes", 0),
            )
        )
    return tuple(out)


def _layer_v2(raw: dict, at: str, v3: bool = False) -> Layer:
    scratch = raw.get("bwd_work_bytes", 0)
    if not v3:
        _unsigned_scratch(scratch, at, PROFILE_FORMAT)
    return Layer(
        name=raw["name"],
        fwd=raw["fwd"],
        bwd=raw["bwd"],
        out_bytes=raw["out_bytes"],
        saved_bytes=raw.get("saved_bytes", 0),
        saves_input=raw.get("saves_input", False),
        saves_output=raw.get("saves_output", False),
        input_grad_bytes=raw.get("input_grad_bytes", 0),
        param_grad_bytes=raw.get("param_grad_bytes", 0),
        fwd_work_bytes=raw.get("fwd_work_bytes", 0),
        bwd_work_bytes=scratch,
        signature=raw.get("signature"),
        options=_options(raw, at) if v3 else (),
        modifies_input=raw.get("modifies_input", False),
    )


def _unsigned_scratch(value: Any, at: str, version: str) -> None:
    """Versions 1 and 2 mean what they meant: a negative scratch is a version-3 value."""
    check_bytes(
        value,
        f"{at}: bwd_work_bytes (in {version}; a negative backward scratch needs "
        f"{PROFILE_FORMAT_V3})",
    )


def _layer_v1(raw: dict, at: str) -> Layer:
    # Checked under its version-1 name: the layer stores it as `out_bytes`.
    saved = check_bytes(raw["saved_bytes"], f"{at}: saved_bytes")
    _unsigned_scratch(raw.get("bwd_work_bytes", 0), at, PROFILE_FORMAT_V1)
    return Layer.v1(
        name=raw["name"],
        fwd=raw["fwd"],
        bwd=raw["bwd"],
        saved_bytes=saved,
        fwd_work_bytes=raw.get("fwd_work_bytes", 0),
        bwd_work_bytes=raw.get("bwd_work_bytes", 0),
        signature=raw.get("signature"),
    )


def profile_from_dict(data: dict) -> Profile:
    """A `Profile` from the parsed JSON of a `planopt.profile/3` (/2, /1) document."""
    if not isinstance(data, dict):
        raise InvalidProfileError(f"profile: must be a JSON object, got {type(data).__name__}")
    version = _check_format(data, PROFILE_FORMAT_V3, PROFILE_FORMAT, PROFILE_FORMAT_V1)
    v1 = version == PROFILE_FORMAT_V1
    v3 = version == PROFILE_FORMAT_V3
    required, optional = (
        (_V1_LAYER_REQUIRED, _V1_LAYER_OPTIONAL)
        if v1
        else (_LAYER_REQUIRED, _V3_LAYER_OPTIONAL if v3 else _LAYER_OPTIONAL)
    )
    _check_keys(
        data,
        ("format", "device", "static_bytes", "layers"),
        ("name", "source"),
        "profile",
        InvalidProfileError,
    )
    dev = data["device"]
    _check_keys(dev, _DEVICE_REQUIRED, _DEVICE_OPTIONAL, "device", InvalidProfileError)
    device = Device(
        name=dev.get("name", "device"),
        h2d_bandwidth=dev["h2d_bandwidth"],
        d2h_bandwidth=dev["d2h_bandwidth"],
        transfer_latency=dev.get("transfer_latency", 0.0),
    )
    raw_layers = data["layers"]
    if not isinstance(raw_layers, list):
        raise InvalidProfileError(
            f"profile: layers must be a list, got {type(raw_layers).__name__}"
        )
    layers = []
    for i, raw in enumerate(raw_layers):
        name = raw.get("name") if isinstance(raw, dict) else None
        at = where(i, name if isinstance(name, str) else None)
        _check_keys(raw, required, optional, at, InvalidProfileError)
        layers.append(_layer_v1(raw, at) if v1 else _layer_v2(raw, at, v3))
    return Profile(
        name=data.get("name", "profile"),
        device=device,
        static_bytes=data["static_bytes"],
        layers=tuple(layers),
        source=data.get("source"),
    )


def profile_to_dict(profile: Profile) -> dict:
    if not isinstance(profile, Profile):
        raise InvalidProfileError(f"profile must be a planopt.Profile, got {show(profile)}")
    version = PROFILE_FORMAT_V3 if profile.is_v3 else PROFILE_FORMAT
    out: dict[str, Any] = {"format": version, "name": profile.name}
    if profile.source is not None:
        out["source"] = profile.source
    dev = profile.device
    out["device"] = {
        "name": dev.name,
        "h2d_bandwidth": dev.h2d_bandwidth,
        "d2h_bandwidth": dev.d2h_bandwidth,
        "transfer_latency": dev.transfer_latency,
    }
    out["static_bytes"] = profile.static_bytes
    out["layers"] = [_layer_to_dict(layer) for layer in profile.layers]
    return out


def _layer_to_dict(layer: Layer) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": layer.name,
        "fwd": layer.fwd,
        "bwd": layer.bwd,
        "out_bytes": layer.out_bytes,
        "saved_bytes": layer.saved_bytes,
        "saves_input": layer.saves_input,
        "saves_output": layer.saves_output,
        "input_grad_bytes": layer.input_grad_bytes,
        "param_grad_bytes": layer.param_grad_bytes,
        "fwd_work_bytes": layer.fwd_work_bytes,
        "bwd_work_bytes": layer.bwd_work_bytes,
        "signature": layer.signature,
    }
    if layer.modifies_input:  # written only when set: older files read back unchanged
        out["modifies_input"] = True
    if layer.options:
        out["options"] = [
            {
                "name": o.name,
                "saved_bytes": o.saved_bytes,
                "recompute": o.recompute,
                "policy": list(o.policy),
                "regen_work_bytes": o.regen_work_bytes,
            }
            for o in layer.options
        ]
    return out


def load_profile(source: str | os.PathLike | dict) -> Profile:
    """Read a profile from a path (or an already parsed dict)."""
    return profile_from_dict(_read_json(source, "profile"))


def save_profile(profile: Profile, path: str | os.PathLike) -> None:
    """Write `profile` as `planopt.profile/2` (/3 when it has menus or a negative scratch).

    The path follows `planopt.paths`' rule.
    """
    write_text(path, json.dumps(profile_to_dict(profile), indent=1) + "\n", "profile file")


# -- plan ------------------------------------------------------------------------


def plan_from_dict(data: dict) -> Plan:
    """A `Plan` from the parsed JSON of a `planopt.plan/2` (or /1) document."""
    if not isinstance(data, dict):
        raise InvalidPlanError(f"plan: must be a JSON object, got {type(data).__name__}")
    v2 = _check_format(data, PLAN_FORMAT_V2, PLAN_FORMAT) == PLAN_FORMAT_V2
    entry_optional = ("name", "prefetch_at", "swap_wait", *(("option",) if v2 else ()))
    _check_keys(data, ("format", "layers"), ("profile", "name"), "plan", InvalidPlanError)
    fingerprint = data.get("profile")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise InvalidPlanError(
            f"plan: profile must be a fingerprint string, got {show(fingerprint)}"
        )
    raw_layers = data["layers"]
    if not isinstance(raw_layers, list):
        raise InvalidPlanError(f"plan: layers must be a list, got {type(raw_layers).__name__}")
    actions, prefetch, wait, names, options = [], [], [], [], []
    for i, raw in enumerate(raw_layers):
        name = raw.get("name") if isinstance(raw, dict) else None
        at = where(i, name if isinstance(name, str) else None)
        _check_keys(raw, ("action",), entry_optional, at, InvalidPlanError)
        if name is not None and not isinstance(name, str):
            raise InvalidPlanError(f"{at}: name must be a string, got {show(name)}")
        actions.append(parse_action(raw["action"], i, name))
        prefetch.append(raw.get("prefetch_at"))
        wait.append(raw.get("swap_wait"))
        names.append(name)
        options.append(raw.get("option"))
    has_names = any(n is not None for n in names)
    return Plan(
        tuple(actions),
        tuple(prefetch),
        tuple(wait),
        tuple(names) if has_names else None,
        fingerprint,
        tuple(options),
    )


def plan_to_dict(plan: Plan) -> dict:
    if not isinstance(plan, Plan):
        raise InvalidPlanError(f"plan must be a planopt.Plan, got {show(plan)}")
    out: dict[str, Any] = {"format": PLAN_FORMAT_V2 if plan.has_options else PLAN_FORMAT}
    if plan.profile is not None:
        out["profile"] = plan.profile
    layers = []
    for i, action in enumerate(plan.actions):
        entry: dict[str, Any] = {}
        if plan.names and plan.names[i] is not None:
            entry["name"] = plan.names[i]
        entry["action"] = action.value
        if plan.options[i] is not None:
            entry["option"] = plan.options[i]
        if action is SWAP:
            entry["prefetch_at"] = plan.prefetch_at[i]
            entry["swap_wait"] = plan.swap_wait[i]
        layers.append(entry)
    out["layers"] = layers
    return out


def load_plan(source: str | os.PathLike | dict) -> Plan:
    """Read a plan from a path (or an already parsed dict)."""
    return plan_from_dict(_read_json(source, "plan"))


def save_plan(plan: Plan, path: str | os.PathLike) -> None:
    """Write `plan` as `planopt.plan/1` (/2 when a layer takes an option).

    The path follows `planopt.paths`' rule.
    """
    write_text(path, json.dumps(plan_to_dict(plan), indent=1) + "\n", "plan file")
