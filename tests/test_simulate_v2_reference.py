"""The simulator, and `planopt simulate --json`, against the independent v2 reference.

`tests/reference_v2.py` was written from the spec's text alone, on plain
JSON dicts, without reading `planopt/simulate.py`: where the two disagree,
one reading of the spec is wrong. Version-2 chains with real layers' flag
mix, exact (tie-heavy) and general values, every action mix.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from reference_v2 import random_v2_chain, random_valid_plan, reference_v2
from strategies import v2_profile_and_plan

import planopt
from planopt import cli
from planopt.io import plan_from_dict, plan_to_dict, profile_from_dict, profile_to_dict


def _agree(profile: planopt.Profile, plan: planopt.Plan) -> None:
    schedule = planopt.simulate(profile, plan)
    ref = reference_v2(profile_to_dict(profile), plan_to_dict(plan))
    assert schedule.makespan == pytest.approx(ref.makespan, rel=1e-9, abs=1e-12)
    assert schedule.peak_bytes == ref.peak_bytes


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(v2_profile_and_plan(1, 7))
def test_the_simulator_matches_the_v2_reference(pair):
    _agree(*pair)


@pytest.mark.parametrize("seed", range(200))
def test_the_simulator_matches_the_v2_reference_on_seeded_chains(seed):
    rng = random.Random(9000 + seed)
    data = random_v2_chain(rng, rng.randint(1, 24), exact=seed % 2 == 0)
    profile = profile_from_dict(data)
    for _ in range(3):
        _agree(profile, plan_from_dict(random_valid_plan(rng, data)))


@pytest.mark.parametrize("seed", range(20))
def test_simulate_json_matches_the_v2_reference(seed, tmp_path, capsys):
    rng = random.Random(9500 + seed)
    data = random_v2_chain(rng, rng.randint(1, 30), exact=seed % 3 == 0)
    plan = random_valid_plan(rng, data)
    (tmp_path / "profile.json").write_text(json.dumps(data))
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    code = cli.main(
        ["simulate", str(tmp_path / "profile.json"), str(tmp_path / "plan.json"), "--json"]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    ref = reference_v2(data, plan)
    assert out["time"] == pytest.approx(ref.makespan, rel=1e-9, abs=1e-12)
    assert out["peak_bytes"] == ref.peak_bytes
