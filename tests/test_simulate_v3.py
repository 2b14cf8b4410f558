"""Cost model version 3 in the simulator: the hand-worked cases and the rules of section 12.

`tests/data/v3-cases.json` states, for each case, the makespan, peak and
`need(i)` worked by hand from `docs/cost-model.md` (each case's `what` gives
the reasoning); the properties below hold for any valid /3 plan.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from strategies import v3_profile_and_plan

import planopt
from planopt import Layer, LayerOption, Plan
from planopt.io import plan_from_dict, profile_from_dict
from planopt.plan import KEEP, SWAP, need_indices
from planopt.schedule import OpKind

CASES = json.loads((Path(__file__).parent / "data" / "v3-cases.json").read_text())["cases"]
EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: f"{c['profile']['name']}-{c['plan']['format']}"
)
def test_the_hand_worked_cases(case):
    profile = profile_from_dict(case["profile"])
    plan = plan_from_dict(case["plan"])
    schedule = planopt.simulate(profile, plan)
    want = case["expected"]
    assert schedule.makespan == pytest.approx(want["makespan"], rel=1e-12, abs=1e-15), case["what"]
    assert schedule.peak_bytes == want["peak_bytes"], case["what"]
    need = need_indices(plan.actions, profile, plan.options)
    assert [need[i] if a is SWAP else None for i, a in enumerate(plan.actions)] == want["need"]


def test_the_cases_cover_every_interaction_of_section_12():
    whats = " ".join(c["what"] for c in CASES)
    for word in ("partial-kept", "partial-swapped", "partial-above-run", "negative-scratch"):
        assert word in whats
    assert any(
        c["plan"]["format"] == "planopt.plan/1" and c["profile"]["format"].endswith("/3")
        for c in CASES
    ), "a /3 profile planned whole"


@EXAMPLES
@given(v3_profile_and_plan())
def test_a_plan_without_options_scores_as_on_the_profile_without_menus(pair):
    profile, plan = pair
    whole = Plan(plan.actions, plan.prefetch_at, plan.swap_wait)
    bare = profile.replace_layers([dataclasses.replace(x, options=()) for x in profile.layers])
    a, b = planopt.simulate(profile, whole), planopt.simulate(bare, whole)
    assert (a.makespan, a.peak_bytes) == (b.makespan, b.peak_bytes)


@EXAMPLES
@given(v3_profile_and_plan())
def test_memory_ends_at_static_plus_parameter_gradients(pair):
    profile, plan = pair
    schedule = planopt.simulate(profile, plan)
    rest = profile.static_bytes + sum(layer.param_grad_bytes for layer in profile.layers)
    if len(schedule.memory_bytes):
        assert int(schedule.memory_bytes[-1]) == rest
    assert schedule.peak_bytes >= profile.static_bytes


@EXAMPLES
@given(v3_profile_and_plan())
def test_regeneration_adds_its_seconds_to_the_compute_stream(pair):
    profile, plan = pair
    schedule = planopt.simulate(profile, plan)
    regen = sum(
        next(o.recompute for o in profile.layers[i].options if o.name == name)
        for i, name in enumerate(plan.options)
        if name is not None
    )
    recompute = sum(
        x.fwd for x, a in zip(profile.layers, plan.actions, strict=True) if a == "recompute"
    )
    assert schedule.compute_seconds == pytest.approx(profile.t_ideal + recompute + regen)
    assert schedule.makespan >= schedule.compute_seconds * (1 - 1e-12)
    kinds = [op.kind for op in schedule.operations()]
    assert kinds.count(OpKind.REGENERATE) == sum(o is not None for o in plan.options)


@EXAMPLES
@given(v3_profile_and_plan())
def test_a_negative_scratch_only_lowers_the_peak_and_never_the_time(pair):
    """Raising every negative scratch to 0 gives the same timeline and a peak no lower."""
    profile, plan = pair
    zeroed = profile.replace_layers(
        [dataclasses.replace(x, bwd_work_bytes=max(0, x.bwd_work_bytes)) for x in profile.layers]
    )
    a = planopt.simulate(profile, plan)
    b = planopt.simulate(
        zeroed, Plan(plan.actions, plan.prefetch_at, plan.swap_wait, options=plan.options)
    )
    assert a.makespan == b.makespan
    assert a.peak_bytes <= b.peak_bytes


def test_an_option_keeping_everything_for_free_changes_only_the_input_read():
    """h_k = s_i, r_k = 0: the plan is the whole layer's with saves_input set."""
    mib = 1 << 20
    layers = (
        Layer("a", 0.001, 0.002, 50 * mib),
        Layer(
            "b",
            0.001,
            0.002,
            20 * mib,
            saved_bytes=30 * mib,
            input_grad_bytes=50 * mib,
            options=(LayerOption("all-kept", 30 * mib, 0.0),),
        ),
        Layer("c", 0.001, 0.002, 5 * mib, saves_input=True, input_grad_bytes=20 * mib),
    )
    profile = planopt.Profile("p", planopt.Device("d", 1e10, 1e10), 0, layers)
    reading = profile.replace_layers(
        [layers[0], dataclasses.replace(layers[1], saves_input=True, options=()), layers[2]]
    )
    for actions in (
        [KEEP, KEEP, KEEP],
        [SWAP, KEEP, KEEP],
        [SWAP, SWAP, KEEP],
        ["recompute", KEEP, KEEP],
    ):
        plan = Plan.build(actions, profile=profile, options=[None, "all-kept", None])
        same = Plan.build(actions, profile=reading)
        a, b = planopt.simulate(profile, plan), planopt.simulate(reading, same)
        assert (a.makespan, a.peak_bytes) == (b.makespan, b.peak_bytes), actions
