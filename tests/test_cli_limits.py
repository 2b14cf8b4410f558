"""The command line's work limits, whole-byte budgets, output-path rule, demo and methods.

Figures are checked against `planopt.solve` called directly and against
the budget arithmetic of the spec (`budget_from_fraction`), not against the
command line's own code; determinism is checked by running twice (and
serially against a process pool), never by timing anything.
"""

from __future__ import annotations

import json
import math

import pytest
from cli_output import one_error_line, run

import planopt
from planopt import cli, registry
from planopt.cli import demo as demo_command
from planopt.io import plan_to_dict

BUNDLED = "vgg16-b128-pipedream"


# -- --work-limit -----------------------------------------------------------------------


def test_solve_work_limit_gives_the_apis_plan_and_reports_the_work(capsys):
    argv = ["solve", BUNDLED, "--budget", "50%", "--method", "lns", "--work-limit", "0.05",
            "--json"]  # fmt: skip
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    data = json.loads(out)
    assert data["work_limit"] == 0.05
    assert data["work_used"] > 0
    profile = planopt.bundled_profile(BUNDLED)
    direct = planopt.solve(profile, "50%", "lns", work_limit=0.05)
    assert data["plan"] == plan_to_dict(direct.plan)
    assert data["time"] == direct.makespan and data["work_used"] == direct.work_used
    code, again, _ = run(capsys, *argv)
    assert json.loads(again)["plan"] == data["plan"]  # the same plan, run after run


@pytest.mark.parametrize("limit", ["abc", "0", "-1", "nan", "inf"])
@pytest.mark.parametrize(
    "argv",
    [
        ["solve", BUNDLED, "--budget", "50%"],
        ["demo"],
        ["experiment", "sweep", BUNDLED],
    ],
)
def test_a_bad_work_limit_is_one_error_line(capsys, argv, limit):
    code, _, err = run(capsys, *argv, "--work-limit", limit)
    assert code == 2
    assert "work_limit" in one_error_line(err)


def test_help_says_what_a_work_unit_is(capsys):
    for command in ("solve", "demo"):
        code, out, _ = run(capsys, command, "--help")
        text = " ".join(out.split())
        assert code == 0 and "--work-limit" in text
        assert "same on any machine" in text and "core" in text


# -- whole-byte budgets -----------------------------------------------------------------


def test_json_budgets_are_whole_bytes(capsys, tmp_path):
    profile = planopt.bundled_profile(BUNDLED)
    static = profile.static_bytes
    exact = static + (planopt.keep_all_peak(profile) - static) / 2
    assert exact != int(exact)  # the case that used to print 959080036.5
    assert planopt.budget_from_fraction(profile, 0.5) == math.floor(exact)
    code, out, _ = run(capsys, "solve", BUNDLED, "--budget", "50%", "--json")
    data = json.loads(out)
    assert code == 0
    assert isinstance(data["budget"], int) and data["budget"] == math.floor(exact)
    assert data["peak_bytes"] <= data["budget"]
    plan = tmp_path / "plan.json"
    planopt.save_plan(planopt.Plan.keep_all(profile), plan)
    code, out, _ = run(capsys, "simulate", BUNDLED, str(plan), "--budget", "50%", "--json")
    assert code == 1  # keep-all does not fit half its activations
    budget = json.loads(out)["budget"]
    assert isinstance(budget, int) and budget == math.floor(exact)


# -- one rule for output paths ---------------------------------------------------------------


def test_show_plot_into_a_missing_folder_is_refused_and_creates_nothing(capsys, tmp_path):
    missing = tmp_path / "no-such-folder"
    code, out, err = run(capsys, "show", BUNDLED, "--plot", str(missing / "x.png"))
    assert code == 2 and out == ""
    assert "--plot" in one_error_line(err) and "no-such-folder" in err
    assert not missing.exists()


def test_sweep_out_needs_its_parent_folder_and_is_not_a_file(capsys, tmp_path):
    missing = tmp_path / "no-such-folder" / "out"
    code, _, err = run(capsys, "experiment", "sweep", BUNDLED, "--out", str(missing))
    assert code == 2 and "--out" in one_error_line(err)
    assert not missing.parent.exists()
    a_file = tmp_path / "file"
    a_file.write_text("")
    code, _, err = run(capsys, "experiment", "sweep", BUNDLED, "--out", str(a_file))
    assert code == 2 and "folder" in one_error_line(err)


# -- demo ------------------------------------------------------------------------------------


def _demo_rows(out: str) -> list[dict]:
    data = json.loads(out)
    rows = []
    for net in data["nets"]:
        for row in net["results"]:
            rows.append({k: v for k, v in row.items() if k != "solve_seconds"})
    return rows


def test_demo_bounds_searches_by_work_and_gives_the_same_table_serial_or_parallel(
    capsys, monkeypatch
):
    """keep-all (a starter: never limited) and lns (a search: limited by work units)."""
    monkeypatch.setattr(registry, "available", lambda: ["keep-all", "lns"])
    argv = ["demo", "--work-limit", "0.01", "--json"]
    code, out, err = run(capsys, *argv, "--workers", "1")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["methods"] == ["keep-all", "lns"]
    assert data["work_limit"] == 0.01 and data["time_limit"] is None
    rows = _demo_rows(out)
    assert len(rows) == 2 * 3 * len(planopt.bundled_profile_names())
    assert {r["work_limit"] for r in rows if r["method"] == "keep-all"} == {None}
    assert {r["work_limit"] for r in rows if r["method"] == "lns"} == {0.01}
    for row in rows:
        assert isinstance(row["budget"], int)
        if row["peak_bytes"] is not None:
            assert row["peak_bytes"] <= row["budget"]
    code, parallel, _ = run(capsys, *argv, "--workers", "2")
    assert code == 0
    assert _demo_rows(parallel) == rows


def test_demo_full_and_default_settings(capsys):
    parser = cli.build_parser()
    default = demo_command.settings(parser.parse_args(["demo"]))
    assert default == (demo_command.DEMO_WORK_LIMIT, None, demo_command.DEMO_EXACT_MAX_LAYERS)
    full = demo_command.settings(parser.parse_args(["demo", "--full"]))
    assert full == (None, demo_command.FULL_TIME_LIMIT, demo_command.FULL_EXACT_MAX_LAYERS)
    mixed = demo_command.settings(parser.parse_args(["demo", "--full", "--work-limit", "2"]))
    assert mixed == (2.0, demo_command.FULL_TIME_LIMIT, demo_command.FULL_EXACT_MAX_LAYERS)


# -- methods ---------------------------------------------------------------------------------


@pytest.mark.parametrize("columns", [60, 80, 120, 400])
def test_methods_fits_the_terminal_and_shows_role_and_space(capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, _ = run(capsys, "methods")
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= columns
    words = set(out.replace(",", " ").replace("(", " ").replace(")", " ").split())
    for name in registry.names():
        spec = registry.get(name)
        assert {spec.name, spec.role.value, spec.space.value} <= words
        if spec.is_available():
            assert set(spec.options()) <= words
    assert "--time-limit" in out and "--work-limit" in out
