"""The overhead benchmark runs end to end on CPU at tiny sizes (no rot).

(The GPU run's smoke test is `tests/test_gpu_run.py`.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

REPO = Path(__file__).resolve().parent.parent


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


def test_overhead_benchmark_runs_on_cpu(tmp_path):
    out = tmp_path / "overhead.md"
    args = ["--size", "tiny", "--models", "mlp", "--steps", "2", "--warmup", "1"]
    args += ["--fixed-layers", "4", "--fixed-steps", "3"]
    run_module("experiments.bench_executor", *args, "--output", str(out))
    text = out.read_text()
    assert "| mlp (tiny) | 4 |" in text and "executor (keep-all)" in text
