"""Executor overhead: a training step under the keep-all plan against plain PyTorch.

Run from the repository root:

    python -m experiments.bench_executor                # CPU: results/executor_overhead.md
    python -m experiments.bench_executor --device cuda  # GPU: results/executor_overhead_cuda.md

For each reference model, three variants of the same training step (forward,
loss, backward; gradients zeroed in place between steps, outside the timing):

* plain: `loss_fn(chain(x), y).backward()`;
* executor: `Executor(chain, keep_all, profile=...)`, as a user runs it (the
  first step, which checks the profile's saved bytes, is a warm-up);
* executor + tracking: the same under the live-storage tracker (a dispatch
  mode on every operator: what `measure` uses for memory on CPU), for
  information.

The variants are interleaved step by step, in an order rotated every step,
so load on a shared machine hits them alike: `--steps` steps of each. Each
step time is compared with the plain step right beside it; the ratio quoted
is the median of these paired ratios (from this one run of the script), and
the step times are medians. A second table isolates the executor's fixed
cost per step on a chain of `L` one-element linear layers, where a step is
almost only Python, so the cost is measured directly rather than as a
difference of two noisy large numbers. Target: executor within 2% of plain.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.nn.functional import mse_loss

import planopt
from planopt.runtime import Chain, Executor, LiveMemory, reference_model
from planopt.runtime.models import REFERENCE_MODELS
from planopt.runtime.profiler import profile

RESULTS = Path(__file__).parent / "results"
INSTANT = planopt.Device("instant", math.inf, math.inf, 0.0)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _zero(chain: torch.nn.Module) -> None:
    for p in chain.parameters():
        if p.grad is not None:
            p.grad.zero_()


def _interleaved(variants: dict, device: torch.device, chain, steps: int, warmup: int):
    """Per variant, its step times; steps interleaved with a rotating order."""
    keys = list(variants)
    for fn in variants.values():
        for _ in range(warmup):
            fn()
            _zero(chain)
    samples: dict[str, list[float]] = {k: [] for k in keys}
    for k in range(steps):
        for key in keys[k % len(keys) :] + keys[: k % len(keys)]:
            _sync(device)
            start = time.perf_counter()
            variants[key]()
            _sync(device)
            samples[key].append(time.perf_counter() - start)
            _zero(chain)
    return samples


def _summary(samples: dict[str, list[float]]) -> dict[str, float]:
    out = {k: statistics.median(v) for k, v in samples.items()}
    for key in samples:
        if key != "plain":
            paired = [a / b for a, b in zip(samples[key], samples["plain"], strict=True)]
            out[f"{key}_ratio"] = statistics.median(paired)
            # The fastest step is the one least disturbed by other processes.
            out[f"{key}_min_ratio"] = min(samples[key]) / min(samples["plain"])
    return out


def _variants(chain, x, y, loss_fn, prof):
    plan = planopt.Plan.keep_all(prof)
    executor = Executor(chain, plan, profile=prof, loss_fn=loss_fn)

    def plain() -> None:
        chain.loss(x, y, loss_fn).backward()

    def run(ex: Executor):
        def step() -> None:
            ex(x, y).backward()

        return step

    def tracked() -> None:
        tracker = LiveMemory(x.device.type)
        tracker.track_model(chain, (x, y))
        with tracker:
            executor(x, y).backward()

    return {"plain": plain, "executor": run(executor), "tracking": tracked}


def bench_model(name: str, size: str, device: torch.device, steps: int, warmup: int) -> dict:
    ref = reference_model(name, size, seed=0)
    chain = ref.chain.to(device)
    x, y = ref.batch(seed=1, device=device)
    link = None if device.type == "cuda" else INSTANT
    prof = profile(
        chain, (x, y), ref.loss_fn, iterations=1, warmup=1, link=link, name=name, menus=False
    )
    samples = _interleaved(_variants(chain, x, y, ref.loss_fn, prof), device, chain, steps, warmup)
    return {"model": f"{name} ({size})", "layers": len(chain), **_summary(samples)}


def bench_fixed_cost(layers: int, device: torch.device, steps: int, warmup: int) -> dict:
    """Per-step cost of the executor itself: a chain of one-element linear layers."""
    torch.manual_seed(0)
    chain = Chain.from_modules([torch.nn.Linear(1, 1) for _ in range(layers)]).to(device)
    x, y = torch.randn(1, 1, device=device), torch.randn(1, 1, device=device)
    link = None if device.type == "cuda" else INSTANT
    prof = profile(chain, (x, y), mse_loss, iterations=1, warmup=1, link=link, menus=False)
    samples = _interleaved(_variants(chain, x, y, mse_loss, prof), device, chain, steps, warmup)
    med = _summary(samples)
    return {
        "layers": layers,
        "plain": med["plain"],
        "executor_cost": med["executor"] - med["plain"],
        "tracking_cost": med["tracking"] - med["plain"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", default="small", choices=["tiny", "small", "gpu"])
    parser.add_argument("--models", nargs="+", default=list(REFERENCE_MODELS))
    parser.add_argument("--steps", type=int, default=40, help="timed steps per variant")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--fixed-layers", type=int, nargs="*", default=[8, 64])
    parser.add_argument("--fixed-steps", type=int, default=400)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default on CPU: 1; on a shared machine OpenMP spin-waits "
        "turn other processes' load into noise)",
    )
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    threads = args.threads or (1 if device.type == "cpu" else None)
    if threads:
        torch.set_num_threads(threads)
    output = args.output or RESULTS / (
        "executor_overhead.md" if device.type == "cpu" else f"executor_overhead_{device.type}.md"
    )

    rows = [bench_model(m, args.size, device, args.steps, args.warmup) for m in args.models]
    fixed = [bench_fixed_cost(n, device, args.fixed_steps, 20) for n in args.fixed_layers]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.machine()
    shown = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m experiments.bench_executor", *shown])
    lines = [
        "# Executor overhead: keep-all plan against plain PyTorch",
        "",
        f"Generated by `{command}` on {where} ({device}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} torch threads, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, 1-minute load average {load:.1f} at the end.",
        f"One training step = forward, loss, backward (no optimizer step); {args.steps} steps "
        "per variant, interleaved step by step (see the script's docstring). Times are "
        "medians; ratios are the median of each step's time over the plain step beside it, "
        "and the fastest step's over plain's fastest, from this one run. A keep-all plan "
        "runs ordinary autograd (no hooks), so its differences from plain are the "
        "machine's noise; the second table measures the executor's own cost directly. "
        "Target: executor within 2% of plain.",
        "",
        "| model | layers | plain | executor (keep-all) | ratio | ratio of fastest steps | "
        "executor + memory tracking | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['layers']} | {r['plain'] * 1e3:.2f} ms | "
            f"{r['executor'] * 1e3:.2f} ms | {r['executor_ratio']:.3f} | "
            f"{r['executor_min_ratio']:.3f} | "
            f"{r['tracking'] * 1e3:.2f} ms | {r['tracking_ratio']:.3f} |"
        )
    lines += [
        "",
        f"Fixed cost of the executor per step: chains of one-element `Linear(1, 1)` layers "
        f"(MSE loss), {args.fixed_steps} interleaved steps per variant; cost = median step "
        "time minus plain's median.",
        "",
        "| layers | plain step | executor cost per step | per layer | tracking cost per step |",
        "|---:|---:|---:|---:|---:|",
    ]
    for f in fixed:
        lines.append(
            f"| {f['layers']} | {f['plain'] * 1e6:.0f} us | {f['executor_cost'] * 1e6:.1f} us | "
            f"{f['executor_cost'] / f['layers'] * 1e6:.2f} us | "
            f"{f['tracking_cost'] * 1e6:.1f} us |"
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
