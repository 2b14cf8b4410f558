"""The simulator against the independent v3 reference (`tests/reference_v3.py`).

The reference was written from docs/cost-model.md's text (sections 3-5 and
12) on plain dicts; where it and `planopt.simulate` disagree, one reading of
the text is wrong. Random `/3` chains: menus, partial layers in every
position (kept, swapped, above and below recompute runs), signed scratch
anywhere down to its floor; and the hand-worked cases.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from reference_v2 import random_v2_chain, random_valid_plan, reference_v2
from reference_v3 import random_v3_chain, random_v3_plan, reference_v3
from strategies import v3_profile_and_plan

import planopt
from planopt.io import plan_from_dict, plan_to_dict, profile_from_dict, profile_to_dict

CASES = json.loads((Path(__file__).parent / "data" / "v3-cases.json").read_text())["cases"]


def _agree(profile: planopt.Profile, plan: planopt.Plan) -> None:
    schedule = planopt.simulate(profile, plan)
    ref = reference_v3(profile_to_dict(profile), plan_to_dict(plan))
    assert schedule.makespan == pytest.approx(ref.makespan, rel=1e-9, abs=1e-12)
    assert schedule.peak_bytes == ref.peak_bytes


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["profile"]["name"])
def test_the_reference_gives_the_hand_worked_cases(case):
    ref = reference_v3(case["profile"], case["plan"])
    assert ref.makespan == pytest.approx(case["expected"]["makespan"], rel=1e-12)
    assert ref.peak_bytes == case["expected"]["peak_bytes"], case["what"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(v3_profile_and_plan(1, 7))
def test_the_simulator_matches_the_v3_reference(pair):
    _agree(*pair)


@pytest.mark.parametrize("seed", range(150))
def test_the_simulator_matches_the_v3_reference_on_seeded_chains(seed):
    rng = random.Random(31000 + seed)
    data = random_v3_chain(rng, rng.randint(1, 16))
    profile = profile_from_dict(data)
    for _ in range(3):
        _agree(profile, plan_from_dict(random_v3_plan(rng, data)))


@pytest.mark.parametrize("seed", range(40))
def test_the_v3_reference_reads_v2_as_the_v2_reference_does(seed):
    """Without menus or negative scratch the v3 text is the v2 text: both references agree."""
    rng = random.Random(32000 + seed)
    data = random_v2_chain(rng, rng.randint(1, 12), exact=seed % 2 == 0)
    for _ in range(3):
        plan = random_valid_plan(rng, data)
        a, b = reference_v3(data, plan), reference_v2(data, plan)
        assert a.makespan == pytest.approx(b.makespan, rel=1e-12, abs=1e-15)
        assert a.peak_bytes == b.peak_bytes
