"""`planopt experiment sweep|suite` on the command line: files written, cache reuse,
and bad input as one error line with exit code 2."""

from __future__ import annotations

import csv
import json

import pytest
from cli_output import run

import planopt
from planopt.experiment import suite

pytest.importorskip("matplotlib")


def test_sweep_writes_tables_and_figures_and_reuses_the_cache(tmp_path, capsys):
    profile = planopt.random_chain(6, seed=4, family="uniform")
    path = tmp_path / "mine.json"
    planopt.save_profile(profile, path)
    out = tmp_path / "out"
    argv = [
        "experiment", "sweep", str(path), "--random", "cnn:5:1",
        "--methods", "greedy", "sqrt-n", "--budgets", "100%", "95%", "90%",
        "--draws", "2", "--out", str(out), "--cache", str(tmp_path / "cache"), "--quiet",
    ]  # fmt: skip
    code, stdout, err = run(capsys, *argv)
    assert code == 0, err
    for name in ("results.csv", "overhead.md", "gap.md", "solve_time.md", "robustness.md"):
        assert (out / "tables" / name).is_file(), name
    for name in ("overhead_vs_budget", "gap_distribution", "solve_time_vs_layers", "robustness"):
        assert (out / "figures" / f"{name}.png").is_file(), name
        assert (out / "figures" / f"{name}.svg").is_file(), name
    assert f"wrote {out / 'tables' / 'gap.md'}" in stdout
    with open(out / "tables" / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["profile"] for r in rows} == {profile.name, "random-cnn-n5-seed0"}
    assert {r["method"] for r in rows} == {"pooch", "sqrt-n", "lower-bound"}
    first = (out / "tables" / "gap.md").read_text()
    code, _, err = run(capsys, *argv)
    assert code == 0, err
    assert (out / "tables" / "gap.md").read_text() == first  # same results from the cache


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["experiment", "sweep"], "give at least one PROFILE"),
        (["experiment", "sweep", "--random", "cnn:5"], "FAMILY:L1,L2,...:SEEDS"),
        (["experiment", "sweep", "--random", "nope:5:1"], "family must be one of"),
        (["experiment", "sweep", "no-such-net"], "bundled profile"),
        (["experiment", "sweep", "--budgets", "lots"], "budget must be a percentage"),
        (["experiment", "sweep", "--random", "cnn:5:1", "--methods", "nope"], "method must be"),
        (["experiment", "sweep", "--random", "cnn:5:1", "--budgets", "10%"], "no job"),
        (["experiment", "sweep", "--workers", "0"], "must be an integer >= 1"),
        (["experiment"], "required"),
    ],
)
def test_bad_input_is_one_error_line(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("planopt: error: ")
    assert message in err


def test_suite_jobs_cover_the_reports_questions():
    jobs, backend_jobs = suite.build_jobs(suite.DEFAULT)
    methods = {j.method for j in jobs}
    assert {"exact", "recompute-only", "swap-only", "pooch", "lower-bound"} <= methods
    assert "brute-force" not in methods
    assert not methods & set(suite.DEFAULT.skip_methods)
    exact = [j for j in jobs if j.method == "exact"]
    assert max(len(j.profile.layers) for j in exact) <= suite.DEFAULT.exact_max_layers
    assert all("backend" not in j.options_dict for j in jobs)
    backends = {j.options_dict.get("backend") for j in backend_jobs}
    assert backends == {"cpsat", "highs", "cbc"}
    assert max(len(j.profile.layers) for j in jobs) == max(suite.DEFAULT.scaling_lengths)
    keys = [j.key() for j in jobs]
    assert len(set(keys)) < len(keys)  # the sweeps overlap; the cache runs each once
    assert json.dumps(suite.DEFAULT.__dict__)
