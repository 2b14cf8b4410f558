"""The demo's rows run under one rule and say what they mean (issue 25, items 2, 4, 13, 14);
the CLI says when the minimum budget is only a lower bound."""

from __future__ import annotations

import json

import pytest
from cli_output import run

import planopt
from planopt import registry
from planopt.budget import min_budget, min_memory_plan
from planopt.cli import demo as demo_command
from planopt.experiment.sweep import SerialExecutor

GPT48 = "gpt-48blk-b8-s1024-h100-pcie5-roofline"
RESNET_BLOCKS = "resnet50-blocks-b128-a100-pcie4-roofline"


def test_demo_footer_explains_every_status_the_rule_and_work_past_the_limit():
    text = demo_command.footer(36, 12, 12, 1.0, "work limit 0.5 per search", 12)
    for word in ("optimal", "feasible", "infeasible", "no plan found", "timeout", "bound"):
        assert f"  {word} " in text, word
    assert "  skipped " in text and "--exact-max-layers" in text
    assert "always run to the end" in text and "exceed the limit" in text
    for name in registry.starters():
        assert name in text


def test_demo_header_says_when_the_min_budget_is_only_a_lower_bound():
    bound = planopt.bundled_profile(RESNET_BLOCKS)
    net = demo_command.net_summary(bound, [])
    witness = planopt.simulate(bound, min_memory_plan(bound)).peak_bytes
    assert net["min_budget"] == min_budget(bound) < witness
    assert net["min_budget_exact"] is False and net["min_budget_upper"] == witness
    header = demo_command.net_table(net).splitlines()[0]
    assert "min budget between 1.46 GiB (23%), a lower bound, and 2.07 GiB (34%)" in header
    exact = demo_command.net_summary(planopt.bundled_profile("vgg16-b128-pipedream"), [])
    assert exact["min_budget_exact"] is True
    assert "between" not in demo_command.net_table(exact).splitlines()[0]


def test_demo_rows_run_under_one_rule_and_no_search_is_worse_than_the_greedy(capsys, monkeypatch):
    # Before: gpt-48 at 70%, the pooch row 6.5% over T_ideal (it ran to the end) and
    # the lns row 20.5% "from the sqrt-n plan" (half of 0.5 units stopped its greedy).
    pytest.importorskip("ortools")
    registry.names()  # the built-in table is read before `available` is patched
    monkeypatch.setattr(registry, "available", lambda: ["pooch", "lns"])
    monkeypatch.setattr(demo_command, "bundled_profile_names", lambda: [GPT48])
    monkeypatch.setattr(demo_command, "DEMO_FRACTIONS", (0.7,))
    monkeypatch.setattr(demo_command, "make_executor", lambda workers: SerialExecutor())
    code, out, err = run(capsys, "demo", "--json")
    assert (code, err) == (0, "")
    rows = {r["method"]: r for r in json.loads(out)["nets"][0]["results"]}
    pooch, lns = rows["pooch"], rows["lns"]
    # the greedy's row is what `solve` gives it under the rule (a starter: no limit)
    alone = planopt.solve(GPT48, pooch["budget"], "pooch", work_limit=pooch["work_limit"])
    assert pooch["work_limit"] is None and lns["work_limit"] == 0.5
    assert pooch["time"] == alone.makespan and pooch["work_used"] == alone.work_used
    assert lns["time"] <= pooch["time"] * (1 + 1e-12)
    assert lns["work_used"] >= pooch["work_used"]  # its greedy finished inside it too


def test_solve_without_a_plan_says_no_plan_found_and_the_bracket(capsys):
    code, out, err = run(capsys, "solve", RESNET_BLOCKS, "--budget", "30%", "--method", "greedy")
    assert code == 1
    assert "no plan found" in out and "a lower bound only" in out
    assert err.startswith("planopt: no plan found: ")
    code, out, _ = run(
        capsys, "solve", RESNET_BLOCKS, "--budget", "30%", "--method", "greedy", "--json"
    )
    data = json.loads(out)
    assert code == 1 and data["status"] == "no plan found"
    assert data["min_budget_exact"] is False and data["min_budget_upper"] > data["min_budget"]


def test_show_says_whether_the_min_budget_is_exact(capsys):
    code, out, _ = run(capsys, "show", RESNET_BLOCKS)
    assert code == 0 and "a lower bound only" in out
    code, out, _ = run(capsys, "show", "vgg16-b128-pipedream")
    assert code == 0 and "(exact)" in out
