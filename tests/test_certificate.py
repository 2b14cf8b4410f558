"""The lower bound's provenance (`planopt.certificate`): what each method's certificate says,
and that `planopt solve` shows it and `--json` carries it as `bound_provenance`."""

from __future__ import annotations

import json

import pytest

import planopt
from planopt import cli
from planopt.certificate import LP, MIP, OPTIMUM, T_IDEAL, Certificate

BUNDLED = "gpt-12blk-b8-s1024-h100-pcie5-roofline"


def test_the_bound_method_says_which_relaxation_proved_it():
    profile = planopt.random_chain(40, seed=2, family="transformer", version=2)
    lp = planopt.solve(profile, "40%", "lower-bound", relax=True, work_limit=20)
    mip = planopt.solve(profile, "40%", "lower-bound", work_limit=20)
    assert lp.bound_provenance.source == LP and lp.bound_provenance.complete
    assert lp.bound_provenance.work > 0 and lp.work_used >= lp.bound_provenance.work
    assert mip.bound_provenance.source in (LP, MIP)
    assert mip.lower_bound >= lp.lower_bound


def test_a_share_too_small_for_the_lp_says_t_ideal_not_a_proof():
    profile = planopt.random_chain(400, seed=4, family="mixed", version=2)
    solution = planopt.solve(profile, "50%", "lower-bound", work_limit=0.01)
    assert solution.lower_bound == profile.t_ideal
    cert = solution.bound_provenance
    assert cert.source == T_IDEAL and not cert.complete and "cannot cover" in cert.detail


def test_blocks_reports_its_lp_certificate_and_a_plan_without_bound_has_none():
    profile = planopt.bundled_profile(BUNDLED)
    blocks = planopt.solve(profile, "50%", "blocks", work_limit=5)
    assert blocks.bound_provenance == Certificate(
        LP, True, blocks.bound_provenance.seconds, blocks.bound_provenance.work,
        "the LP relaxation's optimum",
    )  # fmt: skip
    assert blocks.lower_bound <= blocks.makespan
    assert planopt.solve(profile, "50%", "greedy").bound_provenance is None


def test_a_proven_optimum_is_its_own_certificate():
    profile = planopt.random_chain(4, seed=1, family="uniform", version=2)
    solution = planopt.solve(profile, "60%", "brute-force")
    if solution.status is planopt.Status.OPTIMAL:
        assert solution.bound_provenance.source in (OPTIMUM, T_IDEAL)
        assert solution.bound_provenance.complete


@pytest.mark.parametrize("as_json", [True, False])
def test_planopt_solve_shows_the_provenance(capsys, as_json):
    argv = ["solve", BUNDLED, "--budget", "50%", "--method", "lower-bound"]
    code = cli.main(argv + ["--work-limit", "5"] + (["--json"] if as_json else []))
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    if as_json:
        provenance = json.loads(out)["bound_provenance"]
        assert provenance["source"] in (LP, MIP) and provenance["work"] > 0
        assert set(provenance) == {"source", "complete", "seconds", "work", "detail"}
    else:
        line = next(x for x in out.splitlines() if x.lstrip().startswith("bound from"))
        assert ("lp (" in line or "mip (" in line) and "work units" in line
