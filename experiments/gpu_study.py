"""GPU study: predicted against measured step time and peak memory, method by method.

One command on a machine with a CUDA GPU:

    python -m experiments.gpu_study                  # writes results/gpu_study.md (+ .json)

and then the timing fidelity table on the GPU, `results/fidelity_time_gpu.md`
(`experiments.bench_fidelity_time --device cuda`: real copy streams, the
link measured by the profiler; `--no-fidelity-time` skips it).

and, so that the script cannot rot, the same end to end on CPU at tiny sizes:

    python -m experiments.gpu_study --device cpu     # writes results/gpu_study_cpu.md

For each reference model (`planopt.runtime.models`): profile it on the device
(`planopt.runtime.profile`; on CUDA the host link is measured, on CPU it is
given as instantaneous), time plain PyTorch and the keep-all executor (the
executor's overhead), then at each budget (a percentage of keep-all
activation memory, the spec's convention) solve with each method
(`planopt.solve`; `exact` only for chains up to `--exact-max-layers`, with
`--exact-time-limit`), run every plan with the executor
(`planopt.runtime.measure`) and record predicted and measured step time and
peak. The report gives, per model, a table of every plan, and the measured
gap of each method to the fastest measured plan at the same budget.

The measured peak comes from outside the executor: on CUDA the caching
allocator (`torch.cuda.max_memory_allocated`, with the reserved bytes
beside it), on CPU the live-storage tracker (`planopt.runtime.tracker`), the
same figure `experiments/bench_fidelity.py` checks on every plan. With the
instantaneous CPU link the executor's copies end when they start, as the
prediction assumes.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

import planopt
from experiments import bench_fidelity_time as fidelity_time
from planopt import registry
from planopt.errors import UnsupportedProfileError
from planopt.runtime import reference_model
from planopt.runtime.measure import measure, plain_step_seconds
from planopt.runtime.models import REFERENCE_MODELS
from planopt.runtime.profiler import profile

RESULTS = Path(__file__).parent / "results"
METHODS = ("greedy", "sqrt-n", "all-swap", "superneurons", "exact")
BUDGETS = (70, 50, 30)
CPU_LINK = planopt.Device("cpu (given: instantaneous copies)", math.inf, math.inf, 0.0)
MIB = 2**20


@dataclass(frozen=True)
class Row:
    """One plan: what the planner predicted and what the executor measured."""

    model: str
    budget_percent: float
    budget_bytes: float
    method: str
    status: str
    plan: str = ""
    predicted_seconds: float | None = None
    measured_seconds: float | None = None
    predicted_peak: int | None = None
    measured_peak: int | None = None
    reserved_peak: int | None = None
    note: str = ""


@dataclass(frozen=True)
class ModelInfo:
    model: str
    layers: int
    static_bytes: int
    keep_all_peak: int
    min_budget: int
    t_ideal: float
    plain_seconds: float
    keep_all_seconds: float


def _is_oom(exc: BaseException) -> bool:
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return oom is not None and isinstance(exc, oom)


def study_model(name: str, args: argparse.Namespace, device: torch.device):
    ref = reference_model(name, args.size, seed=args.seed)
    chain = ref.chain.to(device)
    batch = ref.batch(seed=args.seed + 1, device=device)
    link = CPU_LINK if device.type == "cpu" else None
    prof = profile(
        chain,
        batch,
        ref.loss_fn,
        iterations=args.profile_iterations,
        warmup=args.warmup,
        link=link,
        name=f"{name}-{args.size}",
        progress=args.progress,
        menus=False,  # whole layers: every method plans them (some refuse /3 menus)
    )
    run = dict(iterations=args.iterations, warmup=args.warmup)
    plain, _ = plain_step_seconds(chain, batch, ref.loss_fn, **run)
    keep = measure(chain, planopt.Plan.keep_all(prof), batch, ref.loss_fn, profile=prof, **run)
    info = ModelInfo(
        model=name,
        layers=len(prof),
        static_bytes=prof.static_bytes,
        keep_all_peak=planopt.keep_all_peak(prof),
        min_budget=planopt.min_budget(prof),
        t_ideal=prof.t_ideal,
        plain_seconds=plain,
        keep_all_seconds=keep.step_seconds,
    )
    keep_row = Row(
        name,
        100.0,
        info.keep_all_peak,
        "keep-all",
        "optimal",
        "keep all",
        predicted_seconds=prof.t_ideal,
        measured_seconds=keep.step_seconds,
        predicted_peak=info.keep_all_peak,
        measured_peak=keep.peak_bytes,
        reserved_peak=keep.reserved_bytes,
    )
    rows = [keep_row]
    for percent in args.budgets:
        budget = planopt.budget_from_fraction(prof, percent / 100)
        for method in args.methods:
            rows.append(_solve_and_run(ref, chain, batch, prof, method, percent, budget, args))
    return info, rows


def _solve_and_run(ref, chain, batch, prof, method, percent, budget, args) -> Row:
    base = dict(model=ref.name, budget_percent=float(percent), budget_bytes=budget, method=method)
    spec = registry.get(method)
    if not spec.is_available():
        return Row(**base, status="unavailable", note=f"needs {', '.join(spec.requires)}")
    options = {}
    if spec.exact:
        if len(prof) > args.exact_max_layers:
            return Row(**base, status="skipped", note=f"L = {len(prof)} > --exact-max-layers")
        options["time_limit"] = args.exact_time_limit
    try:
        solution = planopt.solve(prof, budget, method, seed=args.seed, **options)
    except UnsupportedProfileError as exc:  # a method that does not model v2 yet
        return Row(**base, status="unsupported", note=str(exc))
    if solution.plan is None:
        return Row(**base, status=solution.status.value, note=solution.message)
    predicted = solution.schedule
    planned = dict(
        status=solution.status.value,
        plan=solution.plan.summary(),
        predicted_seconds=predicted.makespan,
        predicted_peak=predicted.peak_bytes,
    )
    try:
        measured = measure(
            chain,
            solution.plan,
            batch,
            ref.loss_fn,
            profile=prof,
            iterations=args.iterations,
            warmup=args.warmup,
        )
    except RuntimeError as exc:  # an out-of-memory on the device is a result, not a crash
        if not _is_oom(exc):
            raise
        torch.cuda.empty_cache()
        return Row(**base, **planned, note="out of memory on the device")
    return Row(
        **base,
        **planned,
        measured_seconds=measured.step_seconds,
        measured_peak=measured.peak_bytes,
        reserved_peak=measured.reserved_bytes,
    )


# -- report ---------------------------------------------------------------------------


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def _size(nbytes: float | None) -> str:
    """Bytes with a binary unit that keeps 3-4 significant digits."""
    if nbytes is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", MIB), ("KiB", 2**10)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes:.0f} B"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.3f}"


def gaps(rows: list[Row]) -> dict[tuple[str, float], dict[str, float]]:
    """Per (model, budget): each method's measured time over the fastest measured plan, - 1."""
    cells: dict[tuple[str, float], dict[str, float]] = {}
    for r in rows:
        if r.method != "keep-all" and r.measured_seconds is not None:
            cells.setdefault((r.model, r.budget_percent), {})[r.method] = r.measured_seconds
    return {
        key: {m: t / min(times.values()) - 1 for m, t in times.items()}
        for key, times in cells.items()
    }


def render(infos: list[ModelInfo], rows: list[Row], header: list[str]) -> str:
    lines = ["# GPU study: predicted against measured, per method", "", *header, ""]
    lines += [
        "## Models and executor overhead",
        "",
        "| model | layers | static | keep-all peak | min budget | T_ideal ms | "
        "plain step ms | keep-all executor ms | executor / plain |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in infos:
        lines.append(
            f"| {m.model} | {m.layers} | {_size(m.static_bytes)} | {_size(m.keep_all_peak)} | "
            f"{_size(m.min_budget)} | {_ms(m.t_ideal)} | {_ms(m.plain_seconds)} | "
            f"{_ms(m.keep_all_seconds)} | {_ratio(m.keep_all_seconds, m.plain_seconds)} |"
        )
    for m in infos:
        lines += [
            "",
            f"## {m.model}",
            "",
            "| budget | method | status | plan | predicted ms | measured ms | measured / "
            "predicted | predicted peak | measured peak | measured / predicted | reserved | "
            "note |",
            "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in rows:
            if r.model != m.model:
                continue
            lines.append(
                f"| {r.budget_percent:g}% | {r.method} | {r.status} | {r.plan} | "
                f"{_ms(r.predicted_seconds)} | {_ms(r.measured_seconds)} | "
                f"{_ratio(r.measured_seconds, r.predicted_seconds)} | {_size(r.predicted_peak)} | "
                f"{_size(r.measured_peak)} | {_ratio(r.measured_peak, r.predicted_peak)} | "
                f"{_size(r.reserved_peak)} | {r.note.replace('|', '/')} |"
            )
    table = gaps(rows)
    methods = sorted({meth for cell in table.values() for meth in cell})
    lines += [
        "",
        "## Measured gap to the fastest plan at the same budget",
        "",
        "Measured step time of each method over the fastest measured plan in the same "
        "(model, budget) cell, minus 1 (0% = fastest; - = no plan).",
        "",
        "| model | budget | " + " | ".join(methods) + " |",
        "|---|---:|" + "---:|" * len(methods),
    ]
    for (model, percent), cell in table.items():
        values = [f"{cell[m] * 100:.1f}%" if m in cell else "-" for m in methods]
        lines.append(f"| {model} | {percent:g}% | " + " | ".join(values) + " |")
    if table:
        means = [
            statistics.mean(c[m] for c in table.values() if m in c)
            if any(m in c for c in table.values())
            else math.nan
            for m in methods
        ]
        lines.append("| mean | | " + " | ".join(f"{v * 100:.1f}%" for v in means) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else None)
    parser.add_argument("--size", default=None, help="tiny, small or gpu (default: by device)")
    parser.add_argument("--models", nargs="+", default=list(REFERENCE_MODELS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--budgets", nargs="+", type=float, default=list(BUDGETS))
    parser.add_argument("--iterations", type=int, default=None, help="timed steps per plan")
    parser.add_argument("--profile-iterations", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--exact-time-limit", type=float, default=60.0)
    parser.add_argument("--exact-max-layers", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress", action="store_true", help="tqdm bars while profiling")
    parser.add_argument("--output", type=Path, default=None, help="markdown report (+ .json)")
    parser.add_argument(
        "--no-fidelity-time",
        action="store_true",
        help="on CUDA, skip results/fidelity_time_gpu.md (experiments.bench_fidelity_time)",
    )
    args = parser.parse_args(argv)
    if args.device is None:
        parser.error("no CUDA device: run on a GPU machine, or pass --device cpu (tiny sizes)")
    device = torch.device(args.device)
    cpu = device.type == "cpu"
    args.size = args.size or ("tiny" if cpu else "gpu")
    args.iterations = args.iterations or (2 if cpu else 10)
    args.profile_iterations = args.profile_iterations or (2 if cpu else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if cpu else 3)
    output = args.output or RESULTS / ("gpu_study_cpu.md" if cpu else "gpu_study.md")

    infos: list[ModelInfo] = []
    rows: list[Row] = []
    for name in args.models:
        info, model_rows = study_model(name, args, device)
        infos.append(info)
        rows.extend(model_rows)

    where = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    argv_text = " ".join(argv) if argv is not None else f"--device {args.device}"
    header = [
        f"Generated by `python -m experiments.gpu_study {argv_text}` on {where or 'CPU'} "
        f"({device}), torch {torch.__version__}, sizes `{args.size}`, seed {args.seed}.",
        f"Timed steps per plan: {args.iterations} after {args.warmup} warm-up (median); "
        f"profile: {args.profile_iterations} steps. Budgets: % of keep-all activation memory. "
        f"`exact` with a {args.exact_time_limit:g} s limit, for chains of at most "
        f"{args.exact_max_layers} layers.",
        "Measured peak: "
        + (
            "the live-storage tracker (every storage allocated through the dispatcher, "
            "counted once; CPU, with the link given as instantaneous, as the prediction)."
            if cpu
            else "torch.cuda.max_memory_allocated (reserved: max_memory_reserved, the "
            "caching allocator's segments)."
        ),
    ]
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render(infos, rows, header))
    payload = {
        "device": str(device),
        "size": args.size,
        "models": [asdict(i) for i in infos],
        "rows": [asdict(r) for r in rows],
    }
    output.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {output} and {output.with_suffix('.json')}")
    if not cpu and not args.no_fidelity_time:
        # The timing fidelity table on the GPU: real streams and the real link.
        fidelity_time.main(["--device", args.device, "--size", args.size, "--seed", str(args.seed)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
