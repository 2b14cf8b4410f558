"""Cost model version 2 in the simulator: the spec's hand-made cases and its invariants.

The cases (`v2-cases.json`, from the spec's folder, or the copy under
`tests/data/`) state the makespan, peak and `need(i)` the spec's text gives
each; the properties hold for any valid plan of any valid profile.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import v2_profile_and_plan, v2_profiles

import planopt
from planopt.io import plan_from_dict, profile_from_dict
from planopt.plan import KEEP, SWAP, Plan, need_indices
from solvers.brute_force import enumerate_raw

ROOT = Path(__file__).resolve().parents[1]
CASE_FILES = (
    ROOT.parent / "shared" / "spec" / "v2-cases.json",
    ROOT / "tests" / "data" / "v2-cases.json",
)
EXAMPLES = settings(max_examples=150, deadline=None)


def _cases() -> list[dict]:
    for path in CASE_FILES:
        if path.exists():
            return json.loads(path.read_text())["cases"]
    return []


CASES = _cases()


@pytest.mark.skipif(not CASES, reason="v2-cases.json is neither beside the repo nor in tests/data")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c["profile"]["name"])
def test_the_spec_cases(case):
    profile = profile_from_dict(case["profile"])
    plan = plan_from_dict(case["plan"])
    schedule = planopt.simulate(profile, plan)
    want = case["expected"]
    assert schedule.makespan == pytest.approx(want["makespan"], rel=1e-12, abs=1e-15), case["what"]
    assert schedule.peak_bytes == want["peak_bytes"], case["what"]
    need = need_indices(plan.actions, profile)
    got = [need[i] if a is SWAP else None for i, a in enumerate(plan.actions)]
    assert got == want["need"], case["what"]


@EXAMPLES
@given(v2_profile_and_plan())
def test_memory_ends_at_static_plus_parameter_gradients(pair):
    profile, plan = pair
    schedule = planopt.simulate(profile, plan)
    rest = profile.static_bytes + sum(layer.param_grad_bytes for layer in profile.layers)
    if len(schedule.memory_bytes):
        assert int(schedule.memory_bytes[-1]) == rest
    assert schedule.peak_bytes >= rest


@EXAMPLES
@given(v2_profiles())
def test_keep_all_runs_in_t_ideal(profile):
    schedule = planopt.simulate(profile, Plan.keep_all(profile))
    assert schedule.makespan == profile.t_ideal


@EXAMPLES
@given(v2_profile_and_plan())
def test_no_plan_peaks_below_the_minimum_budget(pair):
    profile, plan = pair
    assert planopt.simulate(profile, plan).peak_bytes >= planopt.min_budget(profile)


@settings(max_examples=40, deadline=None)
@given(v2_profiles(1, 3, positive_times=True), st.data())
def test_more_budget_never_slows_the_optimum(profile, data):
    flags = tuple(layer.saves_input for layer in profile.layers)
    scorer = planopt.Scorer(profile)
    scored = [scorer.score(*raw) for raw in enumerate_raw(len(profile.layers), saves_input=flags)]
    low, high = sorted(data.draw(st.integers(0, 2 * max(p for _, p in scored))) for _ in range(2))

    def best(budget):
        fits = [t for t, p in scored if p <= budget]
        return min(fits) if fits else None

    small, large = best(low), best(high)
    if small is not None:
        assert large is not None and large <= small
    # the minimum budget is the least peak of all plans when every time is positive
    value, exact = planopt.min_budget_info(profile)
    assert value <= min(p for _, p in scored)
    if exact:
        assert value == min(p for _, p in scored)


def test_a_version_1_layer_reads_as_its_output():
    v1 = planopt.Layer.v1("a", 1.0, 2.0, 100)
    assert (v1.out_bytes, v1.saved_bytes, v1.saves_output, v1.saves_input) == (100, 0, True, False)
    assert v1.is_v1 and not planopt.Layer("b", 1.0, 2.0, 100).is_v1


def test_a_swap_copies_the_output_only_when_a_backward_reads_it():
    """conv0 -> relu1 -> conv2: relu1 saves its output, conv2 saves its input.
    With relu1 recomputed, conv0's output is the block's base: swapping conv0
    copies it; with relu1 kept, conv0's output has no backward reader."""
    dev = planopt.Device("link", 1.0, 1.0, 0.0)
    layers = (
        planopt.Layer("conv0", 1.0, 1.0, 4),
        planopt.Layer("relu1", 1.0, 1.0, 4, saves_output=True, input_grad_bytes=4),
        planopt.Layer("conv2", 1.0, 1.0, 2, saves_input=True, input_grad_bytes=4),
    )
    profile = planopt.Profile("shared", dev, 0, layers)
    base = Plan.build(["swap", "recompute", "keep"], profile=profile)
    alone = Plan.build(["swap", "keep", "keep"], profile=profile)
    copy = {op.kind.value: op for op in planopt.simulate(profile, base).operations()}
    assert copy["copy_out"].end - copy["copy_out"].start == 4.0  # 4 bytes at 1 B/s
    ops = [op for op in planopt.simulate(profile, alone).operations() if op.layer == 0]
    out = next(op for op in ops if op.kind.value == "copy_out")
    assert out.end - out.start == 0.0  # nothing to copy: no backward reads conv0's products
    # the block of relu1 runs before B_2 (conv2 reads relu1's output): need(0) = 2
    assert need_indices(base.actions, profile)[0] == 2
    assert KEEP in alone.actions
