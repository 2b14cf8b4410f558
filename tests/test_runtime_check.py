"""`planopt.runtime.check` and `planopt run-check`: predicted against measured on a user's model.

The report's measured peak must be the tracker's (an independent `measure`
run on the same model), its predicted peak the simulator's, and the command
line must print it, or fail with one `planopt: error:` line on bad input.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import planopt  # noqa: E402
from planopt.plan import KEEP, RECOMPUTE, SWAP, need_indices  # noqa: E402
from planopt.runtime import reference_model  # noqa: E402
from planopt.runtime.check import check, format_check  # noqa: E402
from planopt.runtime.measure import measure  # noqa: E402
from planopt.runtime.profiler import profile  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
INSTANT = planopt.Device("instant", math.inf, math.inf, 0.0)


def mlp_setup():
    ref = reference_model("mlp", "tiny")
    batch = ref.batch()
    prof = profile(ref.chain, batch, ref.loss_fn, iterations=1, warmup=0, link=INSTANT)
    acts = [SWAP, RECOMPUTE, KEEP, KEEP]
    plan = planopt.Plan.build(acts, need_indices(acts, prof), profile=prof)
    return ref, batch, prof, plan


def test_check_reports_the_trackers_peak_and_the_simulators():
    ref, batch, prof, plan = mlp_setup()
    report = check(ref.chain, plan, batch, ref.loss_fn, profile=prof, iterations=1, warmup=0)
    measured = measure(ref.chain, plan, batch, ref.loss_fn, profile=prof, iterations=0)
    assert report.measured_peak == measured.peak_bytes
    assert report.predicted_peak == planopt.simulate(prof, plan).peak_bytes
    assert report.live_at_peak["parameters"] > 0
    assert [p.name for p in report.phases] == ["forward", "backward", "step"]
    assert all(p.measured > 0 and p.predicted > 0 for p in report.phases)
    text = format_check(report)
    assert "peak memory: predicted" in text and "the model holds" in text
    assert "LiveMemory" in text and "forward" in text


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "planopt", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_run_check_command_prints_the_comparison(tmp_path):
    _, _, prof, plan = mlp_setup()
    prof_path, plan_path = tmp_path / "mlp.profile.json", tmp_path / "plan.json"
    planopt.save_profile(prof, prof_path)
    planopt.save_plan(plan, plan_path)
    model = ["--model", "planopt.runtime.models:reference_model"]
    model += ["--model-args", json.dumps({"name": "mlp", "size": "tiny"})]
    proc = run_cli("run-check", str(prof_path), str(plan_path), *model, "--iterations", "1")
    assert proc.returncode == 0, proc.stderr
    assert "peak memory: predicted" in proc.stdout and "the model holds" in proc.stdout
    proc = run_cli("run-check", str(prof_path), str(plan_path), *model, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["predicted_peak"] == planopt.simulate(prof, plan).peak_bytes
    assert abs(data["peak_error"]) <= 0.02


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "nomodule"], "--model must name a factory as module:attr"),
        (["--model", "planopt.runtime.models:nothing"], "--model must name a factory"),
        (
            ["--model", "planopt.runtime.models:reference_model", "--model-args", "[1]"],
            "--model-args must be a JSON object",
        ),
    ],
)
def test_run_check_bad_model_is_one_error_line(tmp_path, extra, message):
    _, _, prof, plan = mlp_setup()
    prof_path, plan_path = tmp_path / "p.json", tmp_path / "plan.json"
    planopt.save_profile(prof, prof_path)
    planopt.save_plan(plan, plan_path)
    proc = run_cli("run-check", str(prof_path), str(plan_path), *extra)
    assert proc.returncode == 2
    assert proc.stderr.startswith("planopt: error: ") and message in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_fidelity_benchmark_runs_end_to_end(tmp_path):
    out = tmp_path / "fidelity.md"
    args = ["--sizes", "tiny", "--models", "mlp", "--random", "2", "--none-random", "1"]
    args += ["--budgets", "70", "--output", str(out), "--figure", str(tmp_path / "f.png")]
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.bench_fidelity", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    kept = [r for r in rows if r["regime"] == "gradients kept"]
    assert {r["kind"] for r in kept} >= {"keep-all", "random"}
    assert all(r["ok"] for r in kept), [r for r in kept if not r["ok"]]
    assert "## Gradients kept" in out.read_text()
