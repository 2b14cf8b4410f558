"""The GPU study and the overhead benchmark run end to end on CPU at tiny sizes (no rot).

On CPU the study gives the link as instantaneous, so every executed plan's
measured peak (the live-storage tracker's) must be its predicted peak
within the fidelity benchmark's tolerance: the study's own table is a check
of the model against PyTorch for solver-made plans.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

REPO = Path(__file__).resolve().parent.parent
METHODS = {"greedy", "sqrt-n", "all-swap", "superneurons", "exact"}


def run_module(module: str, *args: str) -> None:
    """`python -m module args` from the repository root, as a user runs it."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_gpu_study_runs_on_cpu_and_measured_peaks_equal_predicted(tmp_path):
    out = tmp_path / "study.md"
    args = [
        "--device",
        "cpu",
        "--models",
        "vgg",
        "gpt",
        "--budgets",
        "90",
        "60",
        "--exact-time-limit",
        "10",
    ]
    run_module("experiments.gpu_study", *args, "--output", str(out))
    report = out.read_text()
    for section in ("## Models and executor overhead", "## vgg", "## gpt", "## Measured gap"):
        assert section in report
    data = json.loads(out.with_suffix(".json").read_text())
    rows = data["rows"]
    assert {r["method"] for r in rows} == {"keep-all", *METHODS}
    executed = [r for r in rows if r["measured_peak"] is not None]
    assert {r["method"] for r in executed} >= {"greedy", "all-swap"}
    for r in executed:
        assert r["predicted_peak"] * 0.98 <= r["measured_peak"], r
        assert r["measured_peak"] <= r["predicted_peak"] * 1.005, r
        assert r["measured_peak"] <= r["budget_bytes"] * 1.005, r
        assert r["measured_seconds"] > 0
    assert [m["model"] for m in data["models"]] == ["vgg", "gpt"]


def test_overhead_benchmark_runs_on_cpu(tmp_path):
    out = tmp_path / "overhead.md"
    args = ["--size", "tiny", "--models", "mlp", "--steps", "2", "--warmup", "1"]
    args += ["--fixed-layers", "4", "--fixed-steps", "3"]
    run_module("experiments.bench_executor", *args, "--output", str(out))
    text = out.read_text()
    assert "| mlp (tiny) | 4 |" in text and "executor (keep-all)" in text
