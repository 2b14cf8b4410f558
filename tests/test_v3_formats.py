"""Cost model v3's types and files: menus, signed scratch, `planopt.profile/3`, `planopt.plan/2`.

Older files mean what they meant (a `/2` negative scratch is refused, a `/1`
plan loads), writers emit the oldest version that holds the data, and every
bad value is refused naming the layer, the option and the rule.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from planopt import (
    Device,
    FormatError,
    InvalidPlanError,
    InvalidProfileError,
    Layer,
    Plan,
    Profile,
    bundled_profile,
    random_chain,
)
from planopt.io import (
    load_plan,
    load_profile,
    plan_from_dict,
    plan_to_dict,
    profile_from_dict,
    profile_to_dict,
    save_plan,
    save_profile,
)
from planopt.profile import LayerOption, backward_frees

MIB = 1 << 20
DEVICE = Device("link", 1e10, 1e10, 0.0)


def chain(mid: Layer | None = None, **changes) -> Profile:
    """Three layers; the middle one has 100 MiB of internals and a two-entry menu."""
    menu = (
        LayerOption("save-mm", 40 * MIB, 0.0002, (0, 3)),
        LayerOption("save-none", 0, 0.0005, (), 8 * MIB),
    )
    mid = mid or Layer(
        "block1",
        0.001,
        0.002,
        10 * MIB,
        saved_bytes=100 * MIB,
        saves_input=True,
        input_grad_bytes=10 * MIB,
        options=menu,
    )
    layers = [
        Layer("lin0", 0.001, 0.002, 10 * MIB, saves_input=True),
        mid,
        Layer("lin2", 0.001, 0.002, 5 * MIB, saves_input=True, input_grad_bytes=10 * MIB),
    ]
    return Profile("v3", DEVICE, 100 * MIB, tuple(layers), **changes)


def with_mid(**changes) -> Profile:
    return chain(dataclasses.replace(chain().layers[1], **changes))


def refused(error, *words):
    """`pytest.raises(error)` whose message holds every word."""

    class _Check:
        def __enter__(self):
            self.ctx = pytest.raises(error)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            out = self.ctx.__exit__(*exc)
            for word in words:
                assert word in str(self.info.value), (word, str(self.info.value))
            return out

    return _Check()


# -- menus ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "menu, words",
    [
        ((LayerOption("all", 0, 0.0),), ["layer 1 (block1)", "option 0", "reserved", "'all'"]),
        ((LayerOption("none", 0, 0.0),), ["reserved", "'none'"]),
        ((LayerOption("", 0, 0.0),), ["option 0", "name", "''"]),
        (
            (LayerOption("a", 0, 0.0), LayerOption("a", MIB, 0.0)),
            ["layer 1 (block1)", "unique", "'a'"],
        ),
        (
            (LayerOption("a", 100 * MIB + 1, 0.0),),
            ["option 0 (a)", "saved_bytes", "at most the layer's saved_bytes", "104857600"],
        ),
        ((LayerOption("a", -1, 0.0),), ["option 0 (a)", "saved_bytes", ">= 0", "-1"]),
        ((LayerOption("a", 0, -0.1),), ["option 0 (a)", "recompute", ">= 0", "-0.1"]),
        ((LayerOption("a", 0, 0.0, (1, -2)),), ["option 0 (a)", "policy", ">= 0", "-2"]),
        ((LayerOption("a", 0, 0.0, (True,)),), ["policy", "True"]),
        ((LayerOption("a", 0, 0.0, (3, 3)),), ["policy", "repeat", "3"]),
        ((LayerOption("a", 0, 0.0, "12"),), ["policy", "'12'"]),
        ((LayerOption("a", 0, 0.0, (), -5),), ["regen_work_bytes", ">= 0", "-5"]),
        (("a",), ["option 0", "LayerOption", "'a'"]),
        ("abc", ["options", "sequence"]),
    ],
)
def test_a_bad_menu_is_refused_naming_the_layer_option_and_rule(menu, words):
    with refused(InvalidProfileError, *words):
        with_mid(options=menu)


def test_a_menu_is_normalised_and_kept():
    layer = with_mid(options=[LayerOption("a", 3.0, 1, [2, 0])]).layers[1]
    (option,) = layer.options
    assert isinstance(layer.options, tuple)
    assert option == LayerOption("a", 3, 1.0, (2, 0))
    assert type(option.saved_bytes) is int and type(option.recompute) is float


# -- signed scratch ---------------------------------------------------------------


def test_the_floor_is_what_every_plan_frees_at_the_end_of_the_backward():
    profile = chain()
    # B_1 frees g_2 (10), its internals (100) and its input x_1 (10: lin0 does
    # not save its output, block1 saves its input).
    assert backward_frees(profile.layers, 1) == 120 * MIB
    # B_2: no g_3, no internals, its input x_2 (10 MiB).
    assert backward_frees(profile.layers, 2) == 10 * MIB
    # B_0: g_1 (10); its input is the batch.
    assert backward_frees(profile.layers, 0) == 10 * MIB


def test_a_negative_scratch_down_to_the_floor_is_accepted():
    profile = with_mid(bwd_work_bytes=-120 * MIB)
    assert profile.layers[1].bwd_work_bytes == -120 * MIB
    assert profile.is_v3 and not profile.is_v1


def test_a_negative_scratch_below_the_floor_is_refused_naming_the_floor():
    with refused(
        InvalidProfileError,
        "layer 1 (block1)",
        "bwd_work_bytes",
        f"at least -{120 * MIB}",
        str(-120 * MIB - 1),
    ):
        with_mid(bwd_work_bytes=-120 * MIB - 1)


def test_a_negative_scratch_beyond_the_byte_limit_is_refused():
    with refused(InvalidProfileError, "bwd_work_bytes", "at least -1099511627776"):
        with_mid(bwd_work_bytes=-(2**41))


# -- fingerprint ------------------------------------------------------------------


def test_profiles_without_v3_features_keep_their_fingerprints():
    # Values computed by the code before version 3 (main at 0d5bcee).
    assert random_chain(6, seed=3).fingerprint == "sha256:a880681b17352e7b22f16d189b99d66a"
    assert (
        random_chain(6, seed=3, version=2).fingerprint == "sha256:57bcdfbd923582d91ca45792b92a8cb3"
    )
    assert (
        bundled_profile("gpt2-b8-s1024-h100-pcie5-traced").fingerprint
        == "sha256:1b71d64514d91e1281353f9db551b1aa"
    )


def test_menus_enter_the_fingerprint():
    base = with_mid(options=())
    menu = chain()
    other = with_mid(options=(LayerOption("save-mm", 40 * MIB, 0.0003, (0, 3)),))
    policy = with_mid(options=(LayerOption("save-mm", 40 * MIB, 0.0002, (0, 4)),))
    prints = {p.fingerprint for p in (base, menu, other, policy)}
    assert len(prints) == 4
    assert not base.is_v3 and menu.is_v3


# -- profile files ----------------------------------------------------------------


def test_a_v3_profile_round_trips_through_a_v3_file(tmp_path):
    profile = with_mid(bwd_work_bytes=-MIB)
    save_profile(profile, tmp_path / "p.json")
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["format"] == "planopt.profile/3"
    assert doc["layers"][1]["options"][0] == {
        "name": "save-mm",
        "saved_bytes": 40 * MIB,
        "recompute": 0.0002,
        "policy": [0, 3],
        "regen_work_bytes": 0,
    }
    assert "options" not in doc["layers"][0]
    again = load_profile(tmp_path / "p.json")
    assert again == profile and again.fingerprint == profile.fingerprint


def test_a_profile_without_v3_features_is_written_as_v2():
    doc = profile_to_dict(with_mid(options=()))
    assert doc["format"] == "planopt.profile/2"
    assert all("options" not in layer for layer in doc["layers"])


def test_a_negative_scratch_alone_makes_a_v3_file():
    doc = profile_to_dict(with_mid(options=(), bwd_work_bytes=-1))
    assert doc["format"] == "planopt.profile/3"
    assert profile_from_dict(doc).layers[1].bwd_work_bytes == -1


@pytest.mark.parametrize("version", ["planopt.profile/2", "planopt.profile/1"])
def test_older_files_refuse_a_negative_scratch_naming_version_3(version):
    doc = profile_to_dict(with_mid(options=()))
    doc["format"] = version
    if version.endswith("/1"):
        doc["layers"] = [
            {"name": x["name"], "fwd": x["fwd"], "bwd": x["bwd"], "saved_bytes": x["out_bytes"]}
            for x in doc["layers"]
        ]
    doc["layers"][1]["bwd_work_bytes"] = -3
    with refused(InvalidProfileError, "layer 1", "bwd_work_bytes", version, "profile/3", "-3"):
        profile_from_dict(doc)


def test_a_v2_file_refuses_a_menu_as_an_unknown_field():
    doc = profile_to_dict(chain())
    doc["format"] = "planopt.profile/2"
    with refused(InvalidProfileError, "layer 1 (block1)", "unknown field 'options'"):
        profile_from_dict(doc)


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda o: o.pop("recompute"), ["option 0 (save-mm)", "'recompute' is required"]),
        (lambda o: o.update(cost=1), ["option 0 (save-mm)", "unknown field 'cost'"]),
        (lambda o: o.update(policy=3), ["option 0 (save-mm)", "policy", "list"]),
        (lambda o: o.update(saved_bytes="4MB"), ["option 0 (save-mm)", "saved_bytes", "'4MB'"]),
    ],
)
def test_a_malformed_option_in_a_file_is_refused(change, words):
    doc = profile_to_dict(chain())
    change(doc["layers"][1]["options"][0])
    with refused(InvalidProfileError, "layer 1 (block1)", *words):
        profile_from_dict(doc)


def test_options_must_be_a_list_in_a_file():
    doc = profile_to_dict(chain())
    doc["layers"][1]["options"] = {"a": 1}
    with refused(InvalidProfileError, "layer 1 (block1)", "options must be a list"):
        profile_from_dict(doc)


# -- plans ------------------------------------------------------------------------


def test_a_plan_names_options_on_keep_and_swap_and_round_trips(tmp_path):
    profile = chain()
    plan = Plan.build(["keep", "swap", "keep"], profile=profile, options=[None, "save-none", None])
    assert plan.options == (None, "save-none", None) and plan.has_options
    save_plan(plan, tmp_path / "plan.json")
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert doc["format"] == "planopt.plan/2"
    assert doc["layers"][1]["option"] == "save-none"
    assert "option" not in doc["layers"][0]
    assert load_plan(tmp_path / "plan.json") == plan


def test_a_plan_without_options_is_written_as_v1_and_v1_plans_load():
    plan = Plan.keep_all(chain())
    doc = plan_to_dict(plan)
    assert doc["format"] == "planopt.plan/1"
    assert all("option" not in entry for entry in doc["layers"])
    again = plan_from_dict(doc)
    assert again == plan and again.options == (None, None, None) and not again.has_options


def test_a_v1_plan_file_refuses_an_option():
    doc = plan_to_dict(Plan.keep_all(chain()))
    doc["layers"][1]["option"] = "save-mm"
    with refused(InvalidPlanError, "layer 1", "unknown field 'option'"):
        plan_from_dict(doc)


def test_an_option_on_a_recomputed_layer_is_refused():
    doc = {
        "format": "planopt.plan/2",
        "layers": [
            {"action": "keep"},
            {"action": "recompute", "option": "save-mm"},
            {"action": "keep"},
        ],
    }
    with refused(InvalidPlanError, "layer 1", "option", "keep and swap", "recompute"):
        plan_from_dict(doc)


@pytest.mark.parametrize("bad", [3, "", ["a"]])
def test_an_option_that_is_not_a_name_is_refused(bad):
    with refused(InvalidPlanError, "layer 1", "option"):
        Plan(("keep",) * 3, (None,) * 3, (None,) * 3, options=(None, bad, None))


def test_options_of_the_wrong_length_are_refused():
    with refused(InvalidPlanError, "options", "one entry per layer (3)", "got 2"):
        Plan(("keep",) * 3, (None,) * 3, (None,) * 3, options=(None, None))


def test_a_plan_naming_an_option_the_layer_lacks_is_refused_for_the_profile():
    plan = Plan(("keep",) * 3, (None,) * 3, (None,) * 3, options=("save-mm", None, None))
    with refused(InvalidPlanError, "layer 0 (lin0)", "menu (none)", "'save-mm'"):
        plan.check(chain())
    plan = Plan(("keep",) * 3, (None,) * 3, (None,) * 3, options=(None, "save", None))
    with refused(InvalidPlanError, "layer 1 (block1)", "'save-mm', 'save-none'", "'save'"):
        plan.check(chain())


def test_an_option_makes_the_layer_below_needed_at_its_step():
    # lin0's output x_1 is read by block1's regeneration, as if block1 saved its input.
    mid = dataclasses.replace(chain().layers[1], saves_input=False)
    profile = chain(mid)
    assert Plan.build(["swap", "keep", "keep"], profile=profile).need(profile)[0] == 0
    plan = Plan.build(["swap", "keep", "keep"], profile=profile, options=[None, "save-mm", None])
    assert plan.need(profile)[0] == 1
    assert plan.prefetch_at[0] == 2  # one step ahead of need
    early = Plan(plan.actions, (0, None, None), plan.swap_wait, options=plan.options)
    with refused(InvalidPlanError, "layer 0 (lin0)", "prefetch_at", "[1, 2]", "got 0"):
        early.check(profile)


def test_a_profile_of_a_menu_is_refused_on_the_wrong_format_names():
    with refused(FormatError, "planopt.plan/2", "planopt.plan/1"):
        plan_from_dict({"format": "planopt.plan/9", "layers": []})
