"""The largest sizes and times the model handles exactly, and their refusal beyond.

`saved_bytes: 2**63` used to load and then kill `show`, `solve`,
`simulate` and `min_budget` with an `OverflowError`; `fwd: 1e308` loaded and
made the keep-all peak wrong (every later operation vanished on the clock).
Now a profile names the layer and field of a number beyond the limits of
`planopt.limits` (see its NOTE), and within them every figure is exact:
checked here by scaling, since the simulator's memory is linear in the sizes
(sizes times `k` with bandwidths times `k` keep every time and multiply every
peak by exactly `k`).
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings

import planopt
from planopt import Device, InvalidProfileError, Layer, Plan, PlanoptError, Profile
from planopt.io import load_profile, profile_from_dict
from planopt.limits import MAX_BANDWIDTH, MAX_BYTES, MAX_SECONDS, MAX_TOTAL_BYTES
from tests.strategies import v2_profile_and_plan

NAME = "alexnet-b128-caffe-titanx"
V2_BYTE_FIELDS = (
    "out_bytes",
    "saved_bytes",
    "input_grad_bytes",
    "param_grad_bytes",
    "fwd_work_bytes",
    "bwd_work_bytes",
)


def _v1_doc() -> dict:
    return planopt.io.profile_to_dict(planopt.bundled_profile(NAME))


def _refused(doc: dict, *words: str) -> None:
    with pytest.raises(InvalidProfileError) as info:
        profile_from_dict(doc)
    for word in words:
        assert word in str(info.value), str(info.value)


# -- the cases ---------------------------------------------------------------


@pytest.mark.parametrize("value", [2**63, 10**400, 2**40 + 1, 1e300])
def test_a_size_beyond_the_limit_is_refused_naming_layer_and_field(value):
    doc = json.loads(
        json.dumps(
            {
                "format": "planopt.profile/1",
                "device": {"h2d_bandwidth": 1e10, "d2h_bandwidth": 1e10},
                "static_bytes": 0,
                "layers": [
                    {"name": "a", "fwd": 0.1, "bwd": 0.2, "saved_bytes": 10},
                    {"name": "big", "fwd": 0.1, "bwd": 0.2, "saved_bytes": 10},
                ],
            }
        )
    )
    doc["layers"][1]["saved_bytes"] = value
    _refused(doc, "layer 1 (big)", "saved_bytes", "at most", str(MAX_BYTES))


@pytest.mark.parametrize("field", V2_BYTE_FIELDS)
def test_every_byte_field_has_the_limit(field):
    doc = _v1_doc()
    doc["layers"][3][field] = MAX_BYTES + 1
    name = doc["layers"][3]["name"]
    _refused(doc, f"layer 3 ({name})", field, "at most")


def test_static_bytes_has_the_limit():
    doc = _v1_doc()
    doc["static_bytes"] = 2**63
    _refused(doc, "profile", "static_bytes", "at most")


@pytest.mark.parametrize("value", [1e308, MAX_SECONDS * 2, 10**400])
@pytest.mark.parametrize("field", ["fwd", "bwd"])
def test_a_time_beyond_the_limit_is_refused_naming_layer_and_field(field, value):
    doc = _v1_doc()
    doc["layers"][2][field] = value
    name = doc["layers"][2]["name"]
    _refused(doc, f"layer 2 ({name})", field, "at most")


@pytest.mark.parametrize("value", [MAX_SECONDS * 2, 10**400, 1e308])
def test_latency_has_the_time_limit(value):
    doc = _v1_doc()
    doc["device"]["transfer_latency"] = value
    _refused(doc, "device", "transfer_latency", "at most")


@pytest.mark.parametrize("value", [10**400, 1e300, MAX_BANDWIDTH * 2])
def test_a_finite_bandwidth_has_a_limit(value):
    doc = _v1_doc()
    doc["device"]["h2d_bandwidth"] = value
    _refused(doc, "device", "h2d_bandwidth", "at most")


def test_an_infinite_bandwidth_is_an_ideal_link():
    doc = _v1_doc()
    doc["device"]["h2d_bandwidth"] = float("inf")
    assert profile_from_dict(doc).device.h2d_bandwidth == float("inf")


def test_a_copy_that_takes_too_long_names_the_layer_and_the_bandwidth():
    doc = _v1_doc()
    doc["device"]["d2h_bandwidth"] = 1e-3
    _refused(doc, "layer 0", "d2h_bandwidth", "at most")


def test_the_sizes_of_a_profile_sum_within_the_total_limit():
    per_layer = MAX_BYTES
    n = MAX_TOTAL_BYTES // per_layer + 1
    layers = tuple(Layer.v1(f"l{i}", 1.0, 1.0, per_layer) for i in range(n))
    with pytest.raises(InvalidProfileError) as info:
        Profile("huge", Device("d", 1e12, 1e12), 0, layers)
    message = str(info.value)
    assert "profile" in message and str(MAX_TOTAL_BYTES) in message


def test_a_time_that_would_vanish_on_the_clock_is_refused():
    # 1e-12 s after a 1e6 s forward is below the clock's resolution there.
    layers = (Layer.v1("slow", MAX_SECONDS, 1.0, 10), Layer.v1("tiny", 1e-12, 1.0, 10))
    with pytest.raises(InvalidProfileError) as info:
        Profile("p", Device("d", 1e9, 1e9), 0, layers)
    message = str(info.value)
    assert "layer 1 (tiny)" in message and "fwd" in message and "1e-12" in message


# -- within the limits every figure is exact --------------------------------------------


def _unit_profile(k: int) -> Profile:
    """Every byte field `k`, bandwidths `k` bytes/s: the same times for every `k`."""
    layers = tuple(
        Layer(
            f"l{i}",
            fwd=1.0,
            bwd=2.0,
            out_bytes=k,
            saved_bytes=k,
            saves_input=i % 2 == 1,
            saves_output=True,
            input_grad_bytes=k if i else 0,
            param_grad_bytes=k,
            fwd_work_bytes=k,
            bwd_work_bytes=k,
        )
        for i in range(6)
    )
    return Profile("unit", Device("d", float(k), float(k), 0.25), k, layers)


def test_every_byte_field_at_the_limit_gives_exact_figures():
    small, big = _unit_profile(1), _unit_profile(MAX_BYTES)
    k = MAX_BYTES
    assert planopt.min_budget(big) == k * planopt.min_budget(small)
    assert planopt.keep_all_peak(big) == k * planopt.keep_all_peak(small)
    keep = planopt.keep_all_peak(big)
    assert planopt.parse_budget("50%", big) == big.static_bytes + (keep - big.static_bytes) // 2
    for plan in (Plan.keep_all(big), planopt.min_memory_plan(big)):
        s, b = planopt.simulate(small, _same(plan)), planopt.simulate(big, plan)
        assert b.makespan == s.makespan and b.peak_bytes == k * s.peak_bytes
    solution = planopt.solve(big, "90%", "greedy")
    assert solution.status in (planopt.Status.OPTIMAL, planopt.Status.FEASIBLE)
    assert solution.schedule.peak_bytes <= solution.budget
    assert isinstance(solution.budget, int)


@settings(max_examples=40, deadline=None)
@given(v2_profile_and_plan())
def test_scaling_every_size_to_near_the_limit_scales_every_peak_exactly(case):
    profile, plan = case
    k = 2**33  # sizes <= 64 and static <= 100 stay within MAX_BYTES
    dev = profile.device
    big = Profile(
        "big",
        Device("d", dev.h2d_bandwidth * k, dev.d2h_bandwidth * k, dev.transfer_latency),
        profile.static_bytes * k,
        tuple(
            Layer(
                layer.name,
                layer.fwd,
                layer.bwd,
                layer.out_bytes * k,
                layer.saved_bytes * k,
                layer.saves_input,
                layer.saves_output,
                layer.input_grad_bytes * k,
                layer.param_grad_bytes * k,
                layer.fwd_work_bytes * k,
                layer.bwd_work_bytes * k,
            )
            for layer in profile.layers
        ),
    )
    small_s = planopt.simulate(profile, plan)
    big_s = planopt.simulate(big, _same(plan))
    assert big_s.makespan == small_s.makespan
    assert big_s.peak_bytes == k * small_s.peak_bytes
    assert planopt.min_budget(big) == k * planopt.min_budget(profile)


def _same(plan: Plan) -> Plan:
    """The plan without its fingerprint (it was made for the small profile)."""
    return Plan(plan.actions, plan.prefetch_at, plan.swap_wait)


def test_the_keep_all_peak_does_not_depend_on_a_long_first_forward():
    # The keep-all peak of positive times is independent of their values.
    base = planopt.bundled_profile(NAME)
    slow = base.replace_layers(
        (
            Layer.v1("slow", MAX_SECONDS, 1.0, base.layers[0].out_bytes),
            *base.layers[1:],
        )
    )
    assert planopt.keep_all_peak(slow) == planopt.keep_all_peak(base)


def test_the_file_of_an_oversized_profile_is_refused_before_any_figure(tmp_path):
    doc = _v1_doc()
    doc["layers"][0]["saved_bytes"] = 2**63
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanoptError, match="saved_bytes"):
        load_profile(path)
    doc2 = copy.deepcopy(doc)
    doc2["layers"][0]["saved_bytes"] = 0
    doc2["layers"][0]["fwd"] = 1e308
    path.write_text(json.dumps(doc2))
    with pytest.raises(PlanoptError, match="fwd"):
        load_profile(path)
