"""The command line: every command, the --json shapes, and every class of bad input.

Figures are checked against a 3-layer profile worked out by hand (see
`TINY`), not against the library that computes them. Methods other than
keep-all may not exist yet; their tests skip with the reason.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import cli_output
import pytest
from cli_output import run

import planopt
from planopt import registry
from planopt.cli import demo as demo_command
from planopt.cli import solve as solve_command
from planopt.errors import SolverOptionError
from planopt.experiment import sweep
from planopt.experiment.sweep import SerialExecutor

# NOTE (hand-worked figures for TINY): static 1000 B; s = 100, 200, 300 B;
# fwd 1, 2, 3 s; bwd 2, 4, 6 s; 100 B/s links, no latency.
# keep-all: T = 18 s, peak = 1000 + 100 + 200 + 300 = 1600 (during B_2).
# min budget = 1000 + max(s0, s0 + s1, s1 + s2) = 1500.
# "50%" = 1000 + 0.5 * 600 = 1300 < 1500: no plan fits.
# SWAP_PLAN (layer 0 swapped, copy back issued at step 1): copy out 1-2 s,
# s0 freed at end of F_1 (3 s); copy back 12-13 s, during B_1 (12-16), so
# B_0 runs 16-18: T = 18 s; peak = 1000 + 200 + 300 = 1500 (F_2 to B_2).
TINY = {
    "format": "planopt.profile/1",
    "name": "tiny",
    "device": {"name": "toy", "h2d_bandwidth": 100.0, "d2h_bandwidth": 100.0},
    "static_bytes": 1000,
    "layers": [
        {"name": "a", "fwd": 1.0, "bwd": 2.0, "saved_bytes": 100},
        {"name": "b", "fwd": 2.0, "bwd": 4.0, "saved_bytes": 200},
        {"name": "c", "fwd": 3.0, "bwd": 6.0, "saved_bytes": 300},
    ],
}
SWAP_PLAN = {
    "format": "planopt.plan/1",
    "layers": [
        {"name": "a", "action": "swap", "prefetch_at": 1},
        {"name": "b", "action": "keep"},
        {"name": "c", "action": "keep"},
    ],
}
BUNDLED = "alexnet-b128-caffe-titanx"


def write(path: Path, data) -> str:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


@pytest.fixture
def tiny(tmp_path) -> str:
    return write(tmp_path / "tiny.json", TINY)


@pytest.fixture
def swap_plan(tmp_path) -> str:
    return write(tmp_path / "swap.json", SWAP_PLAN)


def one_error_line(err: str) -> str:
    """stderr must be exactly one `planopt: ...` line, never a traceback."""
    return cli_output.one_error_line(err, prefix="planopt: ")


def method_ready(name: str) -> bool:
    """True when the method's code exists (other agents may still be writing it)."""
    module, _, attr = registry.get(name).target.partition(":")
    try:
        return hasattr(importlib.import_module(module), attr)
    except ImportError:
        return False


def need_method(name: str) -> None:
    if not method_ready(name):
        pytest.skip(f"method {name!r} is registered but its code does not exist yet")


# -- simulate ----------------------------------------------------------------------


def test_simulate_json_matches_hand_worked_figures(capsys, tiny, swap_plan):
    code, out, err = run(capsys, "simulate", tiny, swap_plan, "--budget", "1500", "--json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["time"] == pytest.approx(18.0)
    assert data["peak_bytes"] == 1500
    assert data["feasible"] is True
    assert data["overhead"] == pytest.approx(0.0, abs=1e-12)
    assert data["budget"] == 1500


def test_simulate_over_budget_exits_1_and_says_why(capsys, tiny, swap_plan):
    code, out, err = run(capsys, "simulate", tiny, swap_plan, "--budget", "1499", "--json")
    assert code == 1
    assert json.loads(out)["feasible"] is False
    line = one_error_line(err)
    assert "1500" in line and "1499" in line


def test_simulate_text_reports_the_summary(capsys, tiny, swap_plan):
    code, out, _ = run(capsys, "simulate", tiny, swap_plan)
    assert code == 0
    assert "18.000 s" in out  # makespan and T_ideal
    assert "1500 B" in out
    assert "keep 2, swap 1, recompute 0" in out


def test_simulate_accepts_a_bundled_profile_name(capsys, tmp_path):
    profile = planopt.bundled_profile(BUNDLED)
    path = tmp_path / "keep.json"
    planopt.save_plan(planopt.Plan.keep_all(profile), path)
    code, out, _ = run(capsys, "simulate", BUNDLED, str(path), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["time"] == pytest.approx(profile.t_ideal)
    assert data["peak_bytes"] == planopt.keep_all_peak(profile)


# -- solve -------------------------------------------------------------------------


def test_solve_json_shape_and_output_plan(capsys, tiny, tmp_path):
    out_path = tmp_path / "plan.json"
    code, out, err = run(
        capsys,
        "solve",
        tiny,
        "--budget",
        "1600",
        "--method",
        "keep-all",
        "--output",
        str(out_path),
        "--json",
    )
    assert (code, err) == (0, "")
    data = json.loads(out)
    for key in ("time", "peak_bytes", "feasible", "overhead", "status", "lower_bound"):
        assert key in data
    assert data["method"] == "keep-all"
    assert data["status"] == "optimal"  # keep-all meets T_ideal: nothing is faster
    assert data["time"] == pytest.approx(18.0)
    assert data["peak_bytes"] == 1600
    assert data["min_budget"] == 1500
    assert data["solve_seconds"] >= 0
    assert data["output"] == str(out_path)
    # The written plan carries the profile's fingerprint and simulates the same.
    plan = planopt.load_plan(out_path)
    profile = planopt.load_profile(tiny)
    assert plan.profile == profile.fingerprint
    assert [a.value for a in plan.actions] == ["keep"] * 3
    assert planopt.simulate(profile, plan).peak_bytes == 1600


def test_solve_text_output(capsys, tiny):
    code, out, _ = run(capsys, "solve", tiny, "--budget", "1600B", "--method", "keep-all")
    assert code == 0
    assert "status" in out and "optimal" in out
    assert "keep 3, swap 0, recompute 0" in out


def test_solve_budget_units_and_percent(capsys, tiny):
    # 100% of keep-all activations is exactly the keep-all peak (1600 B).
    code, out, _ = run(capsys, "solve", tiny, "--budget", "100%", "--method", "keep-all", "--json")
    assert code == 0
    assert json.loads(out)["budget"] == 1600
    code, out, _ = run(capsys, "solve", tiny, "--budget", "1KiB", "--method", "keep-all", "--json")
    assert json.loads(out)["budget"] == 1024


@pytest.mark.parametrize(
    ("budget", "words"),
    [
        ("1.5", ["whole number", "'1.5'"]),  # was read as 1 byte
        ("1600.5", ["whole number", "'1600.5'"]),
        ("150%", ["at most 100%", "above keep-all", "100% is keep-all", "'150%'"]),
        ("1e3%", ["at most 100%", "above keep-all", "'1e3%'"]),  # were taken silently
        ("-5%", [">= 0", "'-5%'"]),  # was argparse's "expected one argument"
        ("-1GiB", [">= 0", "'-1GiB'"]),
    ],
)
@pytest.mark.parametrize("command", ["solve", "simulate", "show"])
def test_a_bad_budget_says_its_rule_and_exits_2(capsys, tiny, tmp_path, command, budget, words):
    plan = write(tmp_path / "plan.json", SWAP_PLAN)
    argv = {
        "solve": ["solve", tiny, "--method", "keep-all", "--budget", budget],
        "simulate": ["simulate", tiny, plan, "--budget", budget],
        "show": ["show", tiny, plan, "--budget", budget],
    }[command]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    line = one_error_line(err)
    for word in words:
        assert word in line, line


@pytest.mark.parametrize("budgets", [["-5%"], ["50%", "-5%"], ["150%"]])
def test_a_bad_sweep_budget_says_its_rule_and_exits_2(capsys, budgets):
    code, out, err = run(capsys, "experiment", "sweep", BUNDLED, "--budgets", *budgets)
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert "--budgets" in line and repr(budgets[-1]) in line
    assert (">= 0%" if budgets[-1].startswith("-") else "above keep-all") in line


def test_solve_budget_below_minimum_exits_1_with_the_minimum(capsys, tiny, tmp_path):
    out_path = tmp_path / "plan.json"
    code, out, err = run(
        capsys, "solve", tiny, "--budget", "50%", "--method", "keep-all", "--output", str(out_path)
    )
    assert code == 1
    line = one_error_line(err)
    assert "infeasible" in line and "1500" in line
    assert "infeasible" in out  # the result is still printed on stdout
    assert not out_path.exists()  # no plan that fits, nothing written


def test_solve_method_without_a_fitting_plan_exits_1(capsys, tiny):
    code, out, err = run(
        capsys, "solve", tiny, "--budget", "1599", "--method", "keep-all", "--json"
    )
    assert code == 1
    data = json.loads(out)
    assert data["status"] == "infeasible" and data["plan"] is None
    assert "infeasible" in one_error_line(err)


def test_solve_default_method_is_greedy(capsys, tiny):
    need_method("greedy")
    code, out, _ = run(capsys, "solve", tiny, "--budget", "1500", "--time-limit", "5", "--json")
    data = json.loads(out)
    assert data["method"] == "pooch"  # greedy is pooch's alias
    assert code == 0 and data["status"] in ("optimal", "feasible")
    assert data["peak_bytes"] <= 1500


@pytest.mark.parametrize("method", [m for m in registry.planners() if m != "keep-all"])
def test_solve_every_available_method_on_a_bundled_net(capsys, method):
    need_method(method)
    code, out, err = run(
        capsys, "solve", BUNDLED, "--budget", "70%", "--method", method, "--time-limit", "1",
        "--json",
    )  # fmt: skip
    data = json.loads(out)
    assert data["method"] == method
    if code == 0:
        assert data["status"] in ("optimal", "feasible") and data["feasible"] is True
        assert data["peak_bytes"] <= data["budget"]
    else:
        assert code == 1 and data["status"] in ("infeasible", "no plan found", "timeout")
        one_error_line(err)


def test_solve_with_a_bound_method_prints_the_bound_and_no_plan(capsys):
    code, out, err = run(capsys, "solve", BUNDLED, "--budget", "50%", "--method", "lower-bound",
                         "--json")  # fmt: skip
    data = json.loads(out)
    assert (code, err) == (0, "")
    assert data["status"] == "bound" and data["plan"] is None
    profile = planopt.bundled_profile(BUNDLED)
    assert data["lower_bound"] >= profile.t_ideal
    greedy = planopt.solve(profile, "50%", "greedy")
    assert data["lower_bound"] <= greedy.makespan * (1 + 1e-9)


def test_solve_backend_is_refused_for_a_method_without_that_option(capsys, tiny):
    code, _, err = run(
        capsys, "solve", tiny, "--budget", "1600", "--method", "keep-all", "--backend", "cbc"
    )
    assert code == 2
    line = one_error_line(err)
    assert "--backend" in line and "keep-all" in line


def test_solve_backend_reaches_a_method_that_takes_it(capsys, tiny, monkeypatch):
    seen = {}

    def fake_solve(profile, budget, method, **kwargs):
        seen.update(kwargs)
        raise SolverOptionError(f"backend must be one of x, got {kwargs['backend']!r}")

    class BackendSpec(registry.MethodSpec):
        def options(self) -> list[str]:
            return ["backend"]

    spec = BackendSpec("with-backend", "solvers.baselines:keep_all", "test only")
    monkeypatch.setitem(registry._METHODS, "with-backend", spec)
    monkeypatch.setattr(solve_command, "solve", fake_solve)
    code, _, err = run(
        capsys, "solve", tiny, "--budget", "1600", "--method", "with-backend", "--backend", "y"
    )
    assert seen["backend"] == "y"
    assert code == 2 and "got 'y'" in one_error_line(err)


def test_solve_backend_reaches_the_exact_method(capsys, tiny):
    need_method("exact")
    code, _, err = run(
        capsys, "solve", tiny, "--budget", "1600", "--method", "exact", "--backend", "nope"
    )
    assert code == 2
    line = one_error_line(err)
    assert "backend" in line and "'nope'" in line
    code, out, _ = run(
        capsys, "solve", tiny, "--budget", "1500", "--method", "exact", "--backend", "cpsat",
        "--time-limit", "5", "--json",
    )  # fmt: skip
    data = json.loads(out)
    assert code == 0 and data["method"] == "exact"
    assert data["peak_bytes"] <= 1500
    # SWAP_PLAN meets T_ideal within 1500 B, so the optimum is T_ideal = 18 s.
    assert data["time"] == pytest.approx(18.0)


def test_solve_unwritable_output_is_refused_before_solving(capsys, tiny, tmp_path):
    missing = tmp_path / "no-such-folder" / "plan.json"
    code, out, err = run(
        capsys, "solve", tiny, "--budget", "1600", "--method", "keep-all", "--output", str(missing)
    )
    assert code == 2 and out == ""
    assert "no-such-folder" in one_error_line(err)
    code, _, err = run(
        capsys, "solve", tiny, "--budget", "1600", "--method", "keep-all", "--output", str(tmp_path)
    )
    assert code == 2 and "folder" in one_error_line(err)


def test_solve_output_write_error_is_one_line(capsys, tiny, tmp_path, monkeypatch):
    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    # The write itself fails (a full disk, a race): `planopt.paths` says so in one line.
    monkeypatch.setattr(Path, "write_text", refuse)
    out_path = tmp_path / "plan.json"
    code, _, err = run(
        capsys, "solve", tiny, "--budget", "1600", "--method", "keep-all", "--output", str(out_path)
    )
    assert code == 2
    assert "Permission denied" in one_error_line(err)


# -- show --------------------------------------------------------------------------


def test_show_without_plan_lists_layers_and_keep_all_summary(capsys, tiny):
    code, out, err = run(capsys, "show", tiny)
    assert (code, err) == (0, "")
    for name in ("a", "b", "c"):
        assert any(line.split()[1:2] == [name] for line in out.splitlines() if line.strip())
    assert "300 B" in out  # saved size of c, human readable
    assert "keep-all (no plan given)" in out
    assert "1600 B" in out and "no budget given" in out
    assert "1.46 KiB" in out  # min budget 1500 B


def test_show_with_plan_and_budget(capsys, tiny, swap_plan):
    code, out, _ = run(capsys, "show", tiny, swap_plan, "--budget", "1400")
    assert code == 0
    assert "action" in out
    assert "swap (back at B1)" in out
    assert "does NOT fit" in out  # peak 1500 > 1400
    assert "keep 2, swap 1, recompute 0" in out


def test_show_bundled_profile(capsys):
    profile = planopt.bundled_profile(BUNDLED)
    code, out, _ = run(capsys, "show", BUNDLED)
    assert code == 0
    assert all(layer.name in out for layer in profile.layers)


# -- methods -----------------------------------------------------------------------


def test_methods_lists_every_registered_method(capsys):
    code, out, _ = run(capsys, "methods")
    assert code == 0
    for name in registry.names():
        assert name in out
    assert "greedy" in out  # aliases are shown
    assert "--time-limit" in out
    for name in registry.available():
        spec = registry.get(name)
        if method_ready(name):
            assert all(option in out for option in spec.options())


# -- demo --------------------------------------------------------------------------


def test_demo_compares_methods_on_every_bundled_net(capsys, monkeypatch):
    """Restricted to keep-all plus a fake exact method that refuses big nets,
    so the test is fast and independent of which methods exist yet."""
    real_solve = planopt.solve

    def fake_solve(profile, budget, method, **kwargs):
        if method == "fake-exact":
            n = len(profile.layers)
            raise SolverOptionError(f"fake-exact: nets must have at most 2 layers, got {n}")
        return real_solve(profile, budget, method, **kwargs)

    spec = registry.MethodSpec("fake-exact", "solvers.baselines:keep_all", "test", role="exact")
    monkeypatch.setitem(registry._METHODS, "fake-exact", spec)
    monkeypatch.setattr(registry, "available", lambda: ["keep-all", "brute-force", "fake-exact"])
    monkeypatch.setattr(sweep, "solve", fake_solve)
    monkeypatch.setattr(demo_command, "make_executor", lambda workers: SerialExecutor())
    code, out, err = run(capsys, "demo", "--time-limit", "2", "--json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["methods"] == ["keep-all", "fake-exact"]  # brute-force is never run
    assert [net["profile"] for net in data["nets"]] == planopt.bundled_profile_names()
    for net in data["nets"]:
        profile = planopt.bundled_profile(net["profile"])
        rows = net["results"]
        assert len(rows) == 3 * 2
        assert {r["budget_fraction"] for r in rows} == {0.7, 0.5, 0.3}
        for row in rows:
            if row["method"] == "fake-exact":
                assert row["status"] == "skipped" and "at most 2 layers" in row["message"]
            else:
                # keep-all never fits below 100% of its own activation memory
                assert row["status"] == "infeasible"
                budget = planopt.budget_from_fraction(profile, row["budget_fraction"])
                assert row["budget"] == pytest.approx(budget)

    code, out, _ = run(capsys, "demo", "--time-limit", "2")
    assert code == 0
    for name in planopt.bundled_profile_names():
        assert f"== {name}:" in out
    assert "overhead" in out and "peak (GiB)" in out and "70%" in out and "30%" in out


def test_demo_option_error_from_a_heuristic_is_not_swallowed(capsys, monkeypatch):
    def fake_solve(profile, budget, method, **kwargs):
        raise SolverOptionError("bad option for a non-exact method")

    monkeypatch.setattr(registry, "available", lambda: ["keep-all"])
    monkeypatch.setattr(sweep, "solve", fake_solve)
    monkeypatch.setattr(demo_command, "make_executor", lambda workers: SerialExecutor())
    code, _, err = run(capsys, "demo")
    assert code == 2 and "non-exact" in one_error_line(err)


# -- help and usage ----------------------------------------------------------------


def test_help_documents_exit_codes(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    assert "exit codes" in out and "bad input" in out
    assert BUNDLED in out
    code, out, _ = run(capsys, "solve", "--help")
    assert code == 0 and "--budget" in out and "exit codes" in out


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["solve", BUNDLED],  # --budget is required
        ["simulate", BUNDLED],  # PLAN is required
        ["solve", BUNDLED, "--budget", "1GiB", "--seed", "x"],
    ],
)
def test_usage_errors_are_one_line_exit_2(capsys, argv):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert "--help" in one_error_line(err)


# -- bad input: exit 2, one line, no traceback -------------------------------------


def test_missing_profile_file(capsys, tmp_path):
    code, _, err = run(capsys, "show", str(tmp_path / "missing.json"))
    assert code == 2 and "missing.json" in one_error_line(err)


def test_unknown_bundled_name_lists_the_bundled_ones(capsys):
    code, _, err = run(capsys, "show", "not-a-net")
    line = one_error_line(err)
    assert code == 2 and "not-a-net" in line and BUNDLED in line


def test_unparseable_profile_json(capsys, tmp_path):
    path = write(tmp_path / "broken.json", '{"format": "planopt.profile/1", ')
    code, _, err = run(capsys, "show", path)
    line = one_error_line(err)
    assert code == 2 and "broken.json" in line and "JSON" in line


def test_malformed_profile_field_names_layer_and_field(capsys, tmp_path):
    bad = json.loads(json.dumps(TINY))
    bad["layers"][1]["fwd"] = -2.0
    code, _, err = run(capsys, "show", write(tmp_path / "bad.json", bad))
    line = one_error_line(err)
    assert code == 2 and "layer 1 (b)" in line and "fwd" in line and "-2.0" in line


def test_unparseable_plan_json(capsys, tiny, tmp_path):
    code, _, err = run(capsys, "simulate", tiny, write(tmp_path / "p.json", "[1, 2"))
    assert code == 2 and "p.json" in one_error_line(err)


def test_plan_for_another_profile_is_refused(capsys, tiny, tmp_path):
    other = json.loads(json.dumps(TINY))
    other["layers"][0]["fwd"] = 1.5  # same names and length, other measurements
    other_path = write(tmp_path / "other.json", other)
    plan_path = tmp_path / "plan.json"
    code, _, _ = run(
        capsys, "solve", other_path, "--budget", "1600", "--method", "keep-all",
        "--output", str(plan_path),
    )  # fmt: skip
    assert code == 0
    code, _, err = run(capsys, "simulate", tiny, str(plan_path))
    line = one_error_line(err)
    assert code == 2 and "profile" in line and "solve again" in line


def test_plan_with_wrong_length(capsys, tiny, tmp_path):
    short = {"format": "planopt.plan/1", "layers": [{"action": "keep"}, {"action": "keep"}]}
    code, _, err = run(capsys, "show", tiny, write(tmp_path / "short.json", short))
    line = one_error_line(err)
    assert code == 2 and "(3)" in line and "got 2" in line


def test_plan_with_bad_field(capsys, tiny, tmp_path):
    bad = json.loads(json.dumps(SWAP_PLAN))
    bad["layers"][0]["prefetch_at"] = 7
    code, _, err = run(capsys, "simulate", tiny, write(tmp_path / "bad.json", bad))
    line = one_error_line(err)
    assert code == 2 and "layer 0 (a)" in line and "prefetch_at" in line


@pytest.mark.parametrize("budget", ["12XB", "lots", "-5", "1e999", "GiB"])
def test_bad_budget_string(capsys, tiny, budget):
    code, _, err = run(capsys, "solve", tiny, "--budget", budget, "--method", "keep-all")
    assert code == 2 and "budget" in one_error_line(err)


def test_unknown_method_lists_the_valid_ones(capsys, tiny):
    code, _, err = run(capsys, "solve", tiny, "--budget", "1600", "--method", "gredy")
    line = one_error_line(err)
    assert code == 2 and "gredy" in line and "keep-all" in line and "greedy" in line


@pytest.mark.parametrize("limit", ["abc", "0", "-1", "nan", "inf"])
def test_bad_time_limit(capsys, tiny, limit):
    code, _, err = run(
        capsys, "solve", tiny, "--budget", "1600", "--method", "keep-all", "--time-limit", limit
    )
    assert code == 2 and "time_limit" in one_error_line(err)
    code, _, err = run(capsys, "demo", "--time-limit", limit)
    assert code == 2 and "time_limit" in one_error_line(err)


def test_bad_seed(capsys, tiny):
    code, _, err = run(
        capsys, "solve", tiny, "--budget", "1600", "--method", "keep-all", "--seed", "-1"
    )
    assert code == 2 and "seed" in one_error_line(err)


# -- through a real process ----------------------------------------------------------


def _python_m(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "planopt", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_python_m_planopt_runs_and_reports(tiny, swap_plan):
    proc = _python_m("simulate", tiny, swap_plan, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["time"] == pytest.approx(18.0) and data["peak_bytes"] == 1500


def test_python_m_planopt_bad_input_is_one_line(tmp_path):
    proc = _python_m("show", write(tmp_path / "x.json", "not json"))
    assert proc.returncode == 2
    assert proc.stdout == ""
    one_error_line(proc.stderr)


def test_run_check_help_says_what_its_words_refer_to(capsys):
    # Issue 25: "see below" referred to nothing, the epilog said planopt.profile/1 where
    # run-check needs /2, and the description said "one step" where the default is 3.
    code, out, _ = run(capsys, "run-check", "--help")
    assert code == 0
    text = " ".join(out.split())
    below = text.split("see --model below")
    assert len(below) == 2 and "--model names a factory as MODULE:ATTR" in below[1]
    assert "(chain, (inputs, targets), loss_fn)" in below[1]
    assert "PROFILE must be the planopt.profile/2" in text
    assert "planopt.profile/1 JSON" not in text
    assert "one step" not in text and "3 by default" in text and "(default: 3)" in text
    assert "planopt.runtime.models:reference_model" in text
