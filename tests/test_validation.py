"""Malformed profiles and plans are refused with the right error, naming layer and field.

Each case mutates one thing of a valid document and says which error class
must be raised and which words the message must hold (the place: layer
index and name, or `device`/`profile`/`plan`; and the field).
"""

from __future__ import annotations

import contextlib
import copy
import json
import math

import pytest

from planopt import (
    Device,
    FormatError,
    InvalidPlanError,
    InvalidProfileError,
    Layer,
    Plan,
    PlanoptError,
    Profile,
    ProfileMismatchError,
    simulate,
)
from planopt.io import load_plan, load_profile, plan_from_dict, profile_from_dict

PROFILE = {
    "format": "planopt.profile/1",
    "name": "example",
    "device": {
        "name": "h100-pcie5",
        "h2d_bandwidth": 5.0e10,
        "d2h_bandwidth": 5.0e10,
        "transfer_latency": 1e-05,
    },
    "static_bytes": 536870912,
    "layers": [
        {"name": "conv1", "fwd": 0.0012, "bwd": 0.0025, "saved_bytes": 104857600},
        {
            "name": "relu1",
            "fwd": 0.0002,
            "bwd": 0.0003,
            "saved_bytes": 104857600,
            "fwd_work_bytes": 0,
            "bwd_work_bytes": 0,
            "signature": "relu",
        },
        {"name": "conv2", "fwd": 0.0012, "bwd": 0.0025, "saved_bytes": 52428800},
    ],
}

PLAN = {
    "format": "planopt.plan/1",
    "layers": [
        {"name": "conv1", "action": "swap", "prefetch_at": 2, "swap_wait": None},
        {"name": "relu1", "action": "recompute"},
        {"name": "conv2", "action": "keep"},
    ],
}


def mutated(doc: dict, path: tuple, value=..., *, drop: bool = False) -> dict:
    """A deep copy of `doc` with `path` set to `value` (or removed)."""
    out = copy.deepcopy(doc)
    node = out
    for key in path[:-1]:
        node = node[key]
    if drop:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


@contextlib.contextmanager
def raises_naming(error: type[Exception], *words: str):
    """`pytest.raises(error)` that also checks each word is in the message."""
    with pytest.raises(error) as info:
        yield info
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    assert isinstance(info.value, PlanoptError)


def test_the_examples_are_valid():
    profile = profile_from_dict(PROFILE)
    plan = plan_from_dict(PLAN)
    s = simulate(profile, plan)
    assert s.makespan > 0


# -- profiles --------------------------------------------------------------------

L1 = "layer 1 (relu1)"

PROFILE_CASES = [
    # (id, path, value or DROP, words the message must hold)
    ("missing fwd", ("layers", 1, "fwd"), "DROP", [L1, "'fwd'", "required"]),
    ("missing bwd", ("layers", 1, "bwd"), "DROP", [L1, "'bwd'", "required"]),
    ("missing saved_bytes", ("layers", 1, "saved_bytes"), "DROP", [L1, "saved_bytes"]),
    ("missing name", ("layers", 1, "name"), "DROP", ["layer 1", "'name'", "required"]),
    ("fwd a string", ("layers", 1, "fwd"), "fast", [L1, "fwd", "'fast'"]),
    ("bwd null", ("layers", 1, "bwd"), None, [L1, "bwd", "None"]),
    ("fwd a bool", ("layers", 1, "fwd"), True, [L1, "fwd", "True"]),
    ("negative fwd", ("layers", 1, "fwd"), -0.5, [L1, "fwd", ">= 0", "-0.5"]),
    ("negative bwd", ("layers", 1, "bwd"), -1, [L1, "bwd", ">= 0", "-1"]),
    ("nan fwd", ("layers", 1, "fwd"), math.nan, [L1, "fwd", "nan"]),
    ("infinite bwd", ("layers", 1, "bwd"), math.inf, [L1, "bwd", "inf"]),
    ("negative size", ("layers", 1, "saved_bytes"), -1, [L1, "saved_bytes", ">= 0", "-1"]),
    ("fractional size", ("layers", 1, "saved_bytes"), 1.5, [L1, "saved_bytes", "integer"]),
    ("size a string", ("layers", 1, "saved_bytes"), "1GB", [L1, "saved_bytes", "'1GB'"]),
    ("negative fwd work", ("layers", 1, "fwd_work_bytes"), -3, [L1, "fwd_work_bytes", "-3"]),
    ("negative bwd work", ("layers", 1, "bwd_work_bytes"), -3, [L1, "bwd_work_bytes", "-3"]),
    ("name not a string", ("layers", 1, "name"), 7, ["layer 1", "name", "7"]),
    ("empty name", ("layers", 1, "name"), "", ["layer 1", "name", "''"]),
    ("signature a number", ("layers", 1, "signature"), 3, [L1, "signature", "3"]),
    ("unknown layer field", ("layers", 1, "colour"), "red", [L1, "unknown field", "'colour'"]),
    ("layer not an object", ("layers", 1), [1, 2], ["layer 1", "object", "list"]),
    ("zero h2d bandwidth", ("device", "h2d_bandwidth"), 0, ["device", "h2d_bandwidth", "> 0"]),
    ("zero d2h bandwidth", ("device", "d2h_bandwidth"), 0.0, ["device", "d2h_bandwidth"]),
    ("negative bandwidth", ("device", "d2h_bandwidth"), -5, ["device", "d2h_bandwidth", "-5"]),
    ("bandwidth a string", ("device", "h2d_bandwidth"), "fast", ["device", "h2d_bandwidth"]),
    ("missing bandwidth", ("device", "h2d_bandwidth"), "DROP", ["device", "'h2d_bandwidth'"]),
    ("negative latency", ("device", "transfer_latency"), -1e-3, ["device", "transfer_latency"]),
    ("unknown device field", ("device", "speed"), 1, ["device", "unknown field", "'speed'"]),
    ("device not an object", ("device",), "h100", ["device", "object"]),
    ("negative static", ("static_bytes",), -1, ["profile", "static_bytes", "-1"]),
    ("static a string", ("static_bytes",), "512MB", ["profile", "static_bytes", "'512MB'"]),
    ("missing static", ("static_bytes",), "DROP", ["profile", "'static_bytes'", "required"]),
    ("missing layers", ("layers",), "DROP", ["profile", "'layers'", "required"]),
    ("no layers", ("layers",), [], ["profile", "layers", "at least one"]),
    ("layers not a list", ("layers",), {"a": 1}, ["profile", "layers", "list"]),
    ("unknown top-level field", ("extra",), 1, ["profile", "unknown field", "'extra'"]),
]


@pytest.mark.parametrize(
    ("path", "value", "words"), [c[1:] for c in PROFILE_CASES], ids=[c[0] for c in PROFILE_CASES]
)
def test_malformed_profile_is_refused(path, value, words):
    doc = mutated(PROFILE, path, drop=True) if value == "DROP" else mutated(PROFILE, path, value)
    with raises_naming(InvalidProfileError, *words):
        profile_from_dict(doc)


@pytest.mark.parametrize("fmt", ["planopt.profile/4", "planopt.plan/1", None, 1])
def test_profile_of_another_format_is_refused(fmt):
    # errors.FormatError: "A file is not parseable JSON or not of the expected `format`."
    doc = (
        mutated(PROFILE, ("format",), drop=True)
        if fmt is None
        else mutated(PROFILE, ("format",), fmt)
    )
    words = ("planopt.profile/3", "planopt.profile/2", "planopt.profile/1", repr(fmt))
    with raises_naming(FormatError, "format", *words):
        profile_from_dict(doc)


def test_profile_that_is_not_an_object_is_refused():
    with raises_naming(InvalidProfileError, "profile", "object", "list"):
        profile_from_dict([PROFILE])  # type: ignore[arg-type]


def test_dataclass_constructors_validate_too():
    ok = Layer.v1("a", 1.0, 1.0, 10)
    with raises_naming(InvalidProfileError, "device", "h2d_bandwidth", "0"):
        Device("d", 0.0, 1.0)
    with raises_naming(InvalidProfileError, "device", "transfer_latency"):
        Device("d", 1.0, 1.0, -1.0)
    with raises_naming(InvalidProfileError, "layer 1 (b)", "fwd", "-1"):
        Profile("p", Device("d", 1.0, 1.0), 0, (ok, Layer.v1("b", -1.0, 1.0, 10)))
    with raises_naming(InvalidProfileError, "layer 0 (a)", "out_bytes", "-10"):
        Profile("p", Device("d", 1.0, 1.0), 0, (Layer.v1("a", 1.0, 1.0, -10),))
    with raises_naming(InvalidProfileError, "layer 0 (a)", "saved_bytes", "-10"):
        Profile("p", Device("d", 1.0, 1.0), 0, (Layer("a", 1.0, 1.0, 1, saved_bytes=-10),))
    with raises_naming(InvalidProfileError, "layer 0 (a)", "saves_input", "true or false", "1"):
        Profile("p", Device("d", 1.0, 1.0), 0, (Layer("a", 1.0, 1.0, 1, saves_input=1),))
    with raises_naming(InvalidProfileError, "layer 0 (a)", "input_grad_bytes", "layer 0", "4"):
        Profile("p", Device("d", 1.0, 1.0), 0, (Layer("a", 1.0, 1.0, 1, input_grad_bytes=4),))
    with raises_naming(InvalidProfileError, "layer 1", "must be a Layer"):
        Profile("p", Device("d", 1.0, 1.0), 0, (ok, {"name": "b"}))  # type: ignore[arg-type]
    with raises_naming(InvalidProfileError, "profile", "static_bytes"):
        Profile("p", Device("d", 1.0, 1.0), -1, (ok,))
    with raises_naming(InvalidProfileError, "profile", "layers", "at least one"):
        Profile("p", Device("d", 1.0, 1.0), 0, ())


# -- plans -------------------------------------------------------------------------

P0, P2 = "layer 0 (conv1)", "layer 2 (conv2)"

PLAN_CASES = [
    # need(0) = 1 because layer 1 is recompute: the range is [1, 2].
    ("prefetch_at below need", ("layers", 0, "prefetch_at"), 0, [P0, "prefetch_at", "[1, 2]", "0"]),
    ("prefetch_at above L-1", ("layers", 0, "prefetch_at"), 3, [P0, "prefetch_at", "[1, 2]", "3"]),
    ("prefetch_at negative", ("layers", 0, "prefetch_at"), -1, [P0, "prefetch_at", "-1"]),
    ("prefetch_at a string", ("layers", 0, "prefetch_at"), "2", [P0, "prefetch_at", "'2'"]),
    ("prefetch_at a float", ("layers", 0, "prefetch_at"), 2.0, [P0, "prefetch_at", "2.0"]),
    ("prefetch_at a bool", ("layers", 0, "prefetch_at"), True, [P0, "prefetch_at", "True"]),
    ("prefetch_at missing", ("layers", 0, "prefetch_at"), "DROP", [P0, "prefetch_at", "required"]),
    ("swap_wait below i+1", ("layers", 0, "swap_wait"), 0, [P0, "swap_wait", "[1, 2]", "0"]),
    ("swap_wait above L-1", ("layers", 0, "swap_wait"), 3, [P0, "swap_wait", "[1, 2]", "3"]),
    ("swap_wait a string", ("layers", 0, "swap_wait"), "x", [P0, "swap_wait", "'x'"]),
    ("prefetch_at on keep", ("layers", 2, "prefetch_at"), 2, [P2, "prefetch_at", "keep"]),
    ("swap_wait on keep", ("layers", 2, "swap_wait"), 2, [P2, "swap_wait", "keep"]),
    ("prefetch_at on recompute", ("layers", 1, "prefetch_at"), 1, [L1, "prefetch_at"]),
    ("unknown action", ("layers", 2, "action"), "offload", [P2, "action", "'offload'"]),
    ("action a number", ("layers", 2, "action"), 1, [P2, "action", "1"]),
    ("action upper case", ("layers", 2, "action"), "KEEP", [P2, "action", "'KEEP'"]),
    ("action missing", ("layers", 2, "action"), "DROP", [P2, "'action'", "required"]),
    ("unknown layer field", ("layers", 2, "when"), 1, [P2, "unknown field", "'when'"]),
    ("name not a string", ("layers", 2, "name"), 5, ["layer 2", "name", "5"]),
    ("layer not an object", ("layers", 1), "keep", ["layer 1", "object", "str"]),
    ("layers not a list", ("layers",), None, ["plan", "layers", "list"]),
    ("no layers", ("layers",), [], ["plan", "layers"]),
    ("unknown top-level field", ("extra",), 1, ["plan", "unknown field", "'extra'"]),
    ("fingerprint not a string", ("profile",), 5, ["plan", "profile", "5"]),
]


@pytest.mark.parametrize(
    ("path", "value", "words"), [c[1:] for c in PLAN_CASES], ids=[c[0] for c in PLAN_CASES]
)
def test_malformed_plan_is_refused(path, value, words):
    doc = mutated(PLAN, path, drop=True) if value == "DROP" else mutated(PLAN, path, value)
    with raises_naming(InvalidPlanError, *words):
        plan_from_dict(doc)


@pytest.mark.parametrize("fmt", ["planopt.plan/3", "planopt.profile/1", None])
def test_plan_of_another_format_is_refused(fmt):
    doc = mutated(PLAN, ("format",), drop=True) if fmt is None else mutated(PLAN, ("format",), fmt)
    with raises_naming(FormatError, "format", "planopt.plan/2", "planopt.plan/1", repr(fmt)):
        plan_from_dict(doc)


def test_plan_names_must_match_the_profile():
    profile = profile_from_dict(PROFILE)
    plan = plan_from_dict(mutated(PLAN, ("layers", 2, "name"), "fc"))
    with raises_naming(InvalidPlanError, P2, "name", "'fc'"):
        simulate(profile, plan)
    with raises_naming(InvalidPlanError, P2, "name", "'fc'"):
        plan.check(profile)


def test_plan_without_names_is_accepted_and_errors_still_name_the_layer_index():
    doc = copy.deepcopy(PLAN)
    for layer in doc["layers"]:
        del layer["name"]
    simulate(profile_from_dict(PROFILE), plan_from_dict(doc))
    doc["layers"][0]["prefetch_at"] = 0
    with raises_naming(InvalidPlanError, "layer 0", "prefetch_at", "[1, 2]"):
        plan_from_dict(doc)


@pytest.mark.parametrize("n", [2, 4])
def test_plan_of_the_wrong_length_is_refused(n):
    profile = profile_from_dict(PROFILE)
    doc = {"format": "planopt.plan/1", "layers": [{"action": "keep"}] * n}
    plan = plan_from_dict(doc)
    with raises_naming(InvalidPlanError, "plan", "one entry per profile layer", "(3)", str(n)):
        simulate(profile, plan)
    with raises_naming(InvalidPlanError, "plan", "(3)", str(n)):
        Plan.build(["keep"] * n, profile=profile)


def test_plan_for_another_profile_is_refused():
    profile = profile_from_dict(PROFILE)
    plan = plan_from_dict(PLAN)
    assert simulate(profile, plan.for_profile(profile)).makespan > 0
    other = profile_from_dict(mutated(PROFILE, ("layers", 0, "fwd"), 0.5))
    stamped = plan.for_profile(other)
    with raises_naming(ProfileMismatchError, "plan", other.fingerprint, profile.fingerprint):
        simulate(profile, stamped)
    doc = mutated(PLAN, ("profile",), other.fingerprint)
    with raises_naming(ProfileMismatchError, "plan", other.fingerprint):
        simulate(profile, plan_from_dict(doc))
    # A renamed copy of the same measurements accepts the plan (metadata only).
    renamed = profile_from_dict(mutated(PROFILE, ("name",), "renamed"))
    simulate(renamed, plan.for_profile(profile))


def test_plan_dataclass_validates():
    with raises_naming(InvalidPlanError, "plan", "one entry per layer"):
        Plan(("keep", "keep"), (None,), (None, None))
    with raises_naming(InvalidPlanError, "plan", "at least one"):
        Plan((), (), ())
    with raises_naming(InvalidPlanError, "layer 1 (b)", "action", "'hold'"):
        Plan(("keep", "hold"), (None, None), (None, None), ("a", "b"))
    with raises_naming(InvalidPlanError, "layer 0 (a)", "prefetch_at", "[0, 1]", "5"):
        Plan(("swap", "keep"), (5, None), (None, None), ("a", "b"))
    with raises_naming(InvalidPlanError, "layer 0 (a)", "swap_wait", "[1, 1]", "0"):
        Plan(("swap", "keep"), (1, None), (0, None), ("a", "b"))


# -- files -------------------------------------------------------------------------


@pytest.mark.parametrize("loader", [load_profile, load_plan])
def test_unparseable_file_is_refused(tmp_path, loader):
    path = tmp_path / "broken.json"
    path.write_text('{"format": "planopt.profile/1", "layers": [\n')
    with raises_naming(FormatError, str(path), "JSON", "line"):
        loader(path)


@pytest.mark.parametrize("loader", [load_profile, load_plan])
def test_file_without_an_object_is_refused(tmp_path, loader):
    path = tmp_path / "list.json"
    path.write_text("[1, 2, 3]\n")
    with raises_naming(FormatError, str(path), "object", "list"):
        loader(path)


@pytest.mark.parametrize("loader", [load_profile, load_plan])
def test_missing_file_is_refused(tmp_path, loader):
    path = tmp_path / "absent.json"
    with raises_naming(FormatError, str(path), "cannot be read"):
        loader(path)


def test_files_round_trip_and_bad_values_in_files_name_the_layer(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(PROFILE))
    assert load_profile(path) == profile_from_dict(PROFILE)
    path.write_text(json.dumps(mutated(PROFILE, ("layers", 2, "bwd"), -2)))
    with raises_naming(InvalidProfileError, "layer 2 (conv2)", "bwd", "-2"):
        load_profile(path)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(mutated(PLAN, ("layers", 0, "swap_wait"), 9)))
    with raises_naming(InvalidPlanError, P0, "swap_wait", "9"):
        load_plan(plan_path)
