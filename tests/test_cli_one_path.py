"""The command line checks input with the library's own rules, and sets method options.

Each test names the defect it guards against (issue 16): `--budgets 0.5`
meant 50% in sweeps but is refused by `--budget`; `show --plot` created a
missing folder (and `planopt.plot` still did) while `--output` refused it;
the CLI had no way to set a method's options, so hints said "pass
max_layers to planopt.solve"; `run-check` let a factory's or a device's
complaint out as a traceback.
"""

from __future__ import annotations

import json

import pytest
from cli_output import one_error_line, run

import planopt
from planopt.errors import OutputPathError, SolverOptionError
from planopt.io import plan_to_dict, save_plan

NET = "alexnet-b128-caffe-titanx"


# -- one budget grammar ------------------------------------------------------------------


@pytest.mark.parametrize("text", ["0.5", "0.3", ".7"])
def test_a_bare_fraction_is_refused_by_sweeps_as_by_solve(capsys, tmp_path, text):
    code, _, solve_err = run(capsys, "solve", NET, "--budget", text)
    assert code == 2
    argv = ["experiment", "sweep", NET, "--budgets", text, "--out", str(tmp_path / "o")]
    code, _, sweep_err = run(capsys, *argv, "--no-cache", "--quiet")
    assert code == 2
    percent = f"{float(text) * 100:g}%"
    assert percent in one_error_line(solve_err) and percent in one_error_line(sweep_err)
    assert not (tmp_path / "o").exists()


def test_sweep_budgets_take_percentages(capsys, tmp_path):
    out = tmp_path / "o"
    argv = ["experiment", "sweep", NET, "--budgets", "80%", "--methods", "keep-all", "greedy"]
    code, _, err = run(capsys, *argv, "--out", str(out), "--no-cache", "--quiet", "--no-plots")
    assert code == 0, err
    rows = (out / "tables" / "results.csv").read_text().splitlines()
    assert len(rows) > 1 and all(",0.8," in row for row in rows[1:])


# -- one output-path rule ----------------------------------------------------------------


def test_show_plot_never_creates_a_folder(capsys, tmp_path):
    target = tmp_path / "missing" / "x.png"
    code, _, err = run(capsys, "show", NET, "--plot", str(target))
    assert code == 2 and "must exist" in one_error_line(err)
    assert not target.parent.exists()


def test_the_plot_api_follows_the_output_path_rule(tmp_path):
    pytest.importorskip("matplotlib")
    from planopt.plot import plot_timeline

    profile = planopt.bundled_profile(NET)
    target = tmp_path / "missing" / "x.png"
    with pytest.raises(OutputPathError, match="must exist"):
        plot_timeline(profile, planopt.Plan.keep_all(profile), target)
    assert not target.parent.exists()
    with pytest.raises(OutputPathError, match="must be a file path"):
        plot_timeline(profile, planopt.Plan.keep_all(profile), tmp_path)


def test_a_profile_argument_is_refused_as_the_api_refuses_it(capsys):
    code, _, err = run(capsys, "show", "no-such-net")
    with pytest.raises(planopt.PlanoptError) as info:
        planopt.solve("no-such-net", "50%")
    assert code == 2 and one_error_line(err) == f"planopt: error: {info.value}"


# -- --option NAME=VALUE -----------------------------------------------------------------


def _solve_json(capsys, *argv: str) -> dict:
    code, out, err = run(capsys, "solve", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize(
    ("method", "texts", "options"),
    [
        ("sqrt-n", ["segments=3"], {"segments": 3}),
        ("sqrt-n", ["segments=none"], {"segments": None}),
        ("pooch", ["retry_over_budget=true"], {"retry_over_budget": True}),
        ("lns", ["window=4", "window_work=0.01", "lower_bound=no"],
         {"window": 4, "window_work": 0.01, "lower_bound": False}),
    ],
)  # fmt: skip
def test_option_sets_what_the_api_keyword_sets(capsys, method, texts, options):
    argv = [NET, "--budget", "70%", "--method", method, "--work-limit", "0.05"]
    for text in texts:
        argv += ["--option", text]
    data = _solve_json(capsys, *argv)
    direct = planopt.solve(NET, "70%", method, work_limit=0.05, **options)
    assert data["plan"] == plan_to_dict(direct.plan)


def test_option_lets_exact_plan_a_net_above_its_default_size(capsys):
    profile = planopt.random_chain(8, seed=0)
    with pytest.raises(SolverOptionError, match="--option max_layers=8") as info:
        planopt.solve(profile, "70%", method="exact", max_layers=4)
    hint = str(info.value)
    assert "--option max_layers=8" in hint


def test_option_warm_start_takes_a_plan_file(capsys, tmp_path):
    start = planopt.solve(NET, "50%", "greedy")
    path = tmp_path / "start.json"
    save_plan(start.plan, path)
    argv = [NET, "--budget", "50%", "--method", "exact", "--work-limit", "0.05"]
    data = _solve_json(capsys, *argv, "--option", f"warm_start={path}")
    direct = planopt.solve(NET, "50%", "exact", work_limit=0.05, warm_start=start.plan)
    assert data["plan"] == plan_to_dict(direct.plan)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--method", "exact", "--option", "threads"], "NAME=VALUE"),
        (["--method", "exact", "--option", "=3"], "NAME=VALUE"),
        (["--method", "exact", "--option", "nope=1"], "max_layers"),
        (["--method", "exact", "--option", "max_layers=x"], "max_layers must be int"),
        (["--method", "exact", "--option", "max_layers=2.5"], "max_layers must be int"),
        (["--method", "exact", "--option", "threads=0"], "threads must be an integer >= 1"),
        (["--method", "exact", "--option", "threads=1", "--option", "threads=2"], "once"),
        (["--method", "exact", "--option", "warm_start=missing.json"], "missing.json"),
        (["--method", "pooch", "--option", "retry_over_budget=maybe"], "bool"),
        (["--method", "keep-all", "--option", "x=1"], "(none)"),
        (["--method", "exact", "--backend", "cbc", "--option", "backend=highs"], "both"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(capsys, argv, words):
    code, out, err = run(capsys, "solve", NET, "--budget", "50%", *argv)
    assert code == 2 and out == ""
    assert words in one_error_line(err)


# -- run-check ---------------------------------------------------------------------------


@pytest.fixture
def plan_file(tmp_path):
    path = tmp_path / "plan.json"
    save_plan(planopt.solve(NET, "50%").plan, path)
    return str(path)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--model", "planopt:__version__"], "callable"),
        (["--model", "planopt.runtime.models:reference_model"], "the factory raised TypeError"),
        (["--model", "planopt.runtime.models:reference_model", "--model-args", '{"name": "z"}'],
         "model must be one of"),
        (["--model", "x:y", "--iterations", "0"], "--iterations"),
        (["--model", "x:y", "--device", "bogus"], "--device must be a torch device"),
        (["--model", "x:y", "--device", "cuda:99"], "--device must be a device this machine"),
    ],
)  # fmt: skip
def test_run_check_errors_are_one_line_and_exit_2(capsys, plan_file, argv, words):
    pytest.importorskip("torch")
    code, out, err = run(capsys, "run-check", NET, plan_file, *argv)
    assert code == 2 and out == ""
    assert words in one_error_line(err)


def test_run_check_says_a_plan_is_for_another_profile_before_building(capsys, plan_file):
    code, _, err = run(capsys, "run-check", "vgg16-b128-pipedream", plan_file, "--model", "x:y")
    assert code == 2 and "was made for profile" in one_error_line(err)
