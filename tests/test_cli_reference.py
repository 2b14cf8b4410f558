"""`planopt simulate --json` agrees with the independent reading of the spec.

The figures go through the whole user path (JSON files on disk, the CLI,
its JSON output) and are compared with `tests/reference_sim.py`, which was
written from the spec without reading the simulator.
"""

from __future__ import annotations

import json
import random

import pytest
from reference_sim import reference_simulate
from strategies import random_plan, random_profile

from planopt import cli, save_plan, save_profile


@pytest.mark.parametrize("seed", range(40))
def test_simulate_json_matches_the_reference(seed, tmp_path, capsys):
    rng = random.Random(7000 + seed)
    profile = random_profile(rng, rng.randint(1, 30), exact=seed % 3 == 0)
    plan = random_plan(rng, profile)
    save_profile(profile, tmp_path / "profile.json")
    save_plan(plan, tmp_path / "plan.json")
    code = cli.main(
        ["simulate", str(tmp_path / "profile.json"), str(tmp_path / "plan.json"), "--json"]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    makespan, peak = reference_simulate(profile, plan)
    assert out["time"] == pytest.approx(makespan, rel=1e-9, abs=0)
    assert out["peak_bytes"] == pytest.approx(peak, rel=1e-9, abs=0)
