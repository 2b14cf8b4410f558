"""The GPU run's smoke mode (`--device cpu --tiny`), with ortools, pulp and highspy blocked.

The device machine a session may be lent has none of the MIP packages, and
its time is short: the run must import, plan and write every table without
them, on the same code paths as on the GPU. Here they are hidden as the
device machine lacks them (`sys.modules[name] = None`: an import fails and
`importlib.util.find_spec` says absent), in a subprocess, as
`python -m experiments.gpu_run` runs. On CPU with an instantaneous link the
measured peak (the live-storage tracker) must be the predicted one: the run
is a check of the model against PyTorch for every plan it makes.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

REPO = Path(__file__).resolve().parent.parent
BLOCKED = ("ortools", "pulp", "highspy")
FILES = {
    "link.md",
    "fidelity_memory_gpu.md",
    "fidelity_time_gpu.md",
    "roofline_vs_measured.md",
    "vs_torch_gpu.md",
    "gpu_run.json",
    "log.txt",
}


def run_blocked(*args: str) -> subprocess.CompletedProcess:
    """`python -m experiments.gpu_run args` with the MIP packages hidden."""
    code = (
        "import sys\n"
        f"for name in {BLOCKED!r}:\n"
        "    sys.modules[name] = None\n"
        "from experiments.gpu_run import main\n"
        f"sys.exit(main({list(args)!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
    )


def test_the_blocked_packages_are_absent_in_the_child():
    code = (
        "import sys\n"
        f"for name in {BLOCKED!r}:\n"
        "    sys.modules[name] = None\n"
        "import planopt\n"
        "from planopt import registry\n"
        "print(sorted(set(registry.names()) - set(registry.available())))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, env=env
    )
    unavailable = ast.literal_eval(proc.stdout.strip())
    assert {"exact", "blocks", "lns", "auto", "lower-bound"} <= set(unavailable)


@pytest.mark.slow
def test_smoke_run_writes_every_table_without_the_mip_packages(tmp_path):
    out = tmp_path / "out"
    args = ["--device", "cpu", "--tiny", "--out", str(out)]
    args += ["--models", "mlp", "gpt", "hf-gpt2", "--vs-models", "gpt2"]
    proc = run_blocked(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {p.name for p in out.iterdir()} == FILES  # the device tool returns at most 8
    data = json.loads((out / "gpu_run.json").read_text())
    assert {k: v["status"] for k, v in data["parts"].items()} == {
        p: "ok" for p in ("link", "reference", "time", "roofline", "hf", "vs_torch")
    }
    link = (out / "link.md").read_text()
    for section in ("## Against the planopt.hardware record", "## Copy sizes", "overlap"):
        assert section in link
    assert "measure_cuda_link: CudaUnavailableError" in link  # CUDA-only, said plainly
    memory = (out / "fidelity_memory_gpu.md").read_text()
    assert "MIP packages absent: ortools, pulp, highspy" in memory
    for model in ("mlp", "gpt", "hf-gpt2"):
        assert f"| {model} |" in memory
        assert f"## {model}, per layer" in (out / "roofline_vs_measured.md").read_text()
    assert "## Summary" in (out / "fidelity_time_gpu.md").read_text()
    vs = (out / "vs_torch_gpu.md").read_text()
    assert "| gpt2 | plain (keep all) |" in vs and "planopt + menus remat-dp" in vs
    rows = data["rows"]
    names = {n.split("@")[0] for r in rows for n in r["names"]}
    assert {"keep-all", "random-0", "remat-dp", "blocks-nomip"} <= names
    measured = [r for r in rows if r["measured_peak"] is not None]
    assert len(measured) >= 30 and not [r for r in rows if r["error"]]
    for r in measured:  # instantaneous link on CPU: the model must hold to the byte's 2%
        assert abs(r["memory_error"]) <= 0.02, r
        assert r["measured_seconds"] > 0
    assert any("O" in r["actions"] for r in measured)  # menus (v3) plans ran
    assert any("S" in r["actions"] for r in measured) and any("R" in r["actions"] for r in rows)


@pytest.mark.slow
def test_a_run_out_of_time_still_writes_its_files(tmp_path):
    out = tmp_path / "out"
    proc = run_blocked("--device", "cpu", "--tiny", "--out", str(out), "--budget-seconds", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((out / "gpu_run.json").read_text())
    assert not [r for r in data["rows"] if r["measured_peak"] is not None]
    assert (out / "log.txt").exists() and (out / "fidelity_memory_gpu.md").exists()
    statuses = [m["error"] for m in data["models"]] + [p["status"] for p in data["parts"].values()]
    assert any("skipped" in s for s in statuses)


def test_a_part_that_fails_or_overruns_is_recorded_and_the_next_runs(tmp_path, monkeypatch):
    from experiments import gpu_run

    monkeypatch.setattr(gpu_run, "GRACE", 0.05)
    parts = ("first", "second", "third")
    args = argparse.Namespace(
        out=str(tmp_path), budget_seconds=60.0, argv=[], tiny=True, seed=0, parts=parts
    )
    run = gpu_run.Run(args, __import__("torch").device("cpu"))

    def fails(left):
        raise ValueError("broken part")

    def overruns(left):
        for _ in range(10**9):  # interrupted by the part's alarm long before the end
            time.sleep(0.01)

    ran = []
    run.part("first", overruns, 0.001)  # a share of 0.06 s, then 0.05 s of grace
    run.part("second", fails, 0.5)
    run.part("third", lambda left: ran.append(left() > 0), 0.5)
    assert run.parts["first"]["status"].startswith("timeout: interrupted")
    assert run.parts["second"]["status"] == "failed: ValueError: broken part"
    assert "ValueError: broken part" in run.parts["second"]["traceback"]
    assert run.parts["third"]["status"] == "ok" and ran == [True]
    assert "part second failed" in (tmp_path / "log.txt").read_text()


@pytest.mark.parametrize(
    ("torch_name", "record"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),  # what the device tool's H100 reports
        ("NVIDIA H100 PCIe", "h100-pcie5"),
        ("NVIDIA H200", "h200-sxm"),
        ("NVIDIA A10G", "h100-sxm"),  # no record: a stand-in, said so
    ],
)
def test_the_gpu_record_is_found_by_the_name_torch_reports(torch_name, record):
    from experiments.gpu_models import gpu_record

    found, how = gpu_record(torch_name)
    assert found.name == record
    assert ("stand-in" in how) == (torch_name == "NVIDIA A10G")


def test_hf_checkpointing_uses_the_older_name_where_transformers_has_only_it():
    # transformers 5.17 (the GPU machine's) has gradient_checkpointing_enable(every_n_layers=,
    # offload=) only; 5.24 renamed it activation_checkpointing_enable
    import torch

    from experiments import vs_torch_methods as vm
    from experiments.vs_torch_models import Bench

    class Older(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[dict] = []

        def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None, **kwargs):
            self.calls.append(kwargs)

    model = Older()
    bench = Bench("older", model, {}, None, True, "")
    method = vm.hf_checkpointing(bench, 2)
    assert model.calls == [{"every_n_layers": 2, "offload": False}]
    assert method.name == "HF checkpointing (every_n_layers=2)"


def test_the_profiles_link_does_not_depend_on_measure_cuda_link_working():
    from experiments.gpu_link import LinkResult, profile_link
    from planopt.hardware import H100_SXM

    fit = {"name": "fit", "h2d_gbps": 40.0, "d2h_gbps": 45.0, "latency_us": 8.0}
    got = profile_link(LinkResult(fit=fit), H100_SXM)
    assert (got.h2d_bandwidth, got.d2h_bandwidth, got.transfer_latency) == (40e9, 45e9, 8e-6)
    sweep = [
        dict(size=2**20, direction=d, seconds=1e-4, pinned=True, gbps=10.0) for d in ("h2d", "d2h")
    ] + [
        dict(size=2**30, direction="h2d", seconds=0.03, pinned=True, gbps=35.0),
        dict(size=2**30, direction="d2h", seconds=0.03, pinned=True, gbps=36.0),
        dict(size=2**26, direction="h2d", seconds=1.0, pinned=False, gbps=1.0),
    ]
    got = profile_link(LinkResult(sweep=sweep, errors=["measure_cuda_link: failed"]), H100_SXM)
    assert (got.h2d_bandwidth, got.d2h_bandwidth, got.transfer_latency) == (35e9, 36e9, 1e-4)
    got = profile_link(LinkResult(), H100_SXM)
    assert got.h2d_bandwidth == H100_SXM.link_bandwidth and "not measured" in got.name
