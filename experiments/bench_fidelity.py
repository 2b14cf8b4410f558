"""Fidelity of the memory model: predicted peak against what PyTorch really holds.

    python -m experiments.bench_fidelity        # results/fidelity_memory.md (+ .json, figure)

For every model (issue 25's conv-BN net; the reference models at `tiny` and `small`; GPT-2 and
Llama built from a config when `transformers` is installed; torchvision
where it imports), on CPU:

1. profile it (`planopt.runtime.profile`, link given as instantaneous: the
   CPU copy engine's copies end when they start);
2. plans: keep-all, `--random` random valid plans (seeded), a plan with
   a recompute run of every shape (`run_shape_plans`: length 1..4 at the
   bottom, middle and top, swaps beside or not), and every
   planning method's plan at each budget (70/50/30% of keep-all activation
   memory). Methods plan on the same profile with a link as slow as the
   model's activations over its step time, so that swapping is not free and
   their plans mix swaps and recomputations; the plan is then predicted and
   run under the instantaneous link (its validity does not depend on the
   link); each method gets 4 work units (`planopt.work`), so its plans
   are the same on any machine under any load;
3. predicted peak: the simulator; measured peak: `measure()`, i.e. the
   live-storage tracker (`planopt.runtime.tracker`), which counts every
   storage the step allocates through the dispatcher, whoever holds it.

Target: within 2% on every plan, never an under-prediction beyond 0.5% (a
plan that "fits" would run out of memory). Gradients are kept and zeroed in
place between steps (the profiler's default). A second table runs the
same kinds of plans (fewer random ones) with gradients set to None between
steps, where the model over-predicts; it names the tensors that cause the
gap, and a last section shows what a signed backward scratch would close. On a CUDA machine
`python -m experiments.gpu_run` writes the same comparison against the
caching allocator (`results/gpu/fidelity_memory_gpu.md`).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

import planopt
from planopt import registry
from planopt.errors import PlanoptError
from planopt.plan import KEEP, RECOMPUTE, SWAP, Plan, need_indices
from planopt.runtime import Chain, reference_model
from planopt.runtime.check import peak_operation
from planopt.runtime.hf import HF_MODELS, hf_available, hf_model
from planopt.runtime.measure import measure
from planopt.runtime.models import REFERENCE_MODELS, ReferenceModel, classification_loss
from planopt.runtime.profiler import profile_with_release
from planopt.schedule import OP_KINDS, OpKind, Schedule

RESULTS = Path(__file__).parent / "results"
FIGURES = Path(__file__).parent / "figures"
INSTANT = planopt.Device("instantaneous (CPU copies)", math.inf, math.inf, 0.0)
BUDGETS = (70, 50, 30)
OVER, UNDER = 0.02, 0.005
WORK_LIMIT = 4.0  # work units: the same plans on any machine under any load
TIME_LIMIT = 120.0  # a safety cap only; the work limit ends every solve first


@dataclass(frozen=True)
class Row:
    """One plan: the predicted and the measured peak."""

    model: str
    regime: str
    kind: str  # keep-all, random, or a method's name
    budget: str | None
    plan: str
    predicted: int
    measured: int
    predicted_at: str
    measured_at: str
    categories: dict[str, int] = field(default_factory=dict)
    actions: str = ""  # k/s/r per layer
    prefetch_at: tuple[int | None, ...] = ()
    cause: str = ""
    signed: int = 0  # the peak with a signed backward scratch (`signed_scratch_peak`)

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1

    @property
    def ok(self) -> bool:
        return -UNDER <= self.error <= OVER

    @property
    def signed_error(self) -> float:
        return self.signed / self.measured - 1

    @property
    def signed_ok(self) -> bool:
        return -UNDER <= self.signed_error <= OVER


def models(sizes: list[str], names: list[str] | None) -> tuple[list, list[str]]:
    """The models to run and notes on the ones that could not be built."""
    out, notes = [], []
    if names is None or "conv-bn" in names:
        out.append(conv_bn_model())
    for size in sizes:
        for name in REFERENCE_MODELS:
            if names is None or name in names:
                out.append(reference_model(name, size))
        if hf_available():
            for name in HF_MODELS:
                if names is None or f"hf-{name}" in names:
                    out.append(hf_model(name, size))
    if not hf_available():
        notes.append("transformers is not installed (`pip install planopt[models]`): no HF rows")
    try:
        import torchvision  # noqa: F401
    except Exception as exc:  # any failure to import is the note
        notes.append(
            f"torchvision does not import here ({type(exc).__name__}: {exc}); PyPI's "
            "build is made for CUDA torch and fails with the CPU torch of this machine"
        )
    return out, notes


def random_plan(rng: random.Random, prof: planopt.Profile) -> Plan:
    n = len(prof)
    acts = [rng.choice((KEEP, SWAP, RECOMPUTE)) for _ in range(n)]
    need = need_indices(acts, prof)
    prefetch: list[int | None] = [None] * n
    wait: list[int | None] = [None] * n
    for i, a in enumerate(acts):
        if a is SWAP:
            prefetch[i] = rng.randint(need[i], n - 1)
            if i < n - 1 and rng.random() < 0.3:
                wait[i] = rng.randint(i + 1, n - 1)
    return Plan.build(acts, prefetch, wait, profile=prof)


def run_shape_plans(prof: planopt.Profile, longest: int = 4) -> list[Plan]:
    """Plans with one recompute run of every shape: length 1..`longest`,
    starting at every layer (the bottom, each place in the middle, the top),
    with keeps beside it, the layer below swapped, and both neighbours
    swapped (copies back at their latest step, `need(i)`). Random and method
    plans rarely hold a run of two or more layers whose base has no other
    reader, where a base held too long showed (issue 25)."""
    n = len(prof)
    out: dict[str, Plan] = {}
    for length in range(1, min(longest, n) + 1):
        for first in range(n - length + 1):
            top = first + length - 1
            for beside in ((), (first - 1,), (first - 1, top + 1)):
                acts = [KEEP] * n
                for i in range(first, top + 1):
                    acts[i] = RECOMPUTE
                for i in beside:
                    if 0 <= i < n:
                        acts[i] = SWAP
                need = need_indices(acts, prof)
                prefetch = [need[i] if a is SWAP else None for i, a in enumerate(acts)]
                plan = Plan.build(acts, prefetch, profile=prof)
                out.setdefault("".join(a.value[0] for a in acts), plan)
    return list(out.values())


def conv_bn_model() -> ReferenceModel:
    """Issue 25's net: per-operator layers, batch-norm, a run's base of 4 MiB."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        chain = Chain.from_modules(
            [
                torch.nn.Conv2d(3, 32, 3, padding=1),
                torch.nn.BatchNorm2d(32),
                torch.nn.ReLU(),
                torch.nn.Conv2d(32, 64, 3, padding=1),
                torch.nn.BatchNorm2d(64),
                torch.nn.ReLU(),
                torch.nn.MaxPool2d(2),
                torch.nn.Conv2d(64, 64, 3, padding=1),
                torch.nn.ReLU(),
                torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16384, 10)),
            ]
        )

    def make(gen: torch.Generator, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(b, 3, 32, 32, generator=gen), torch.randint(10, (b,), generator=gen)

    return ReferenceModel("conv-bn", "issue 25", chain, classification_loss, 16, make)


def planning_link(prof: planopt.Profile) -> planopt.Device:
    """A link that copies keep-all's activations in about one step's compute time."""
    activations = planopt.keep_all_peak(prof) - prof.static_bytes
    bandwidth = max(1.0, activations / max(prof.t_ideal, 1e-9))
    return planopt.Device("planning link (activations per step time)", bandwidth, bandwidth, 0.0)


def budget_points(prof: planopt.Profile, budgets) -> list[tuple[str, int]]:
    """(label, bytes): each percentage of keep-all activation memory (the spec's
    convention; often below the minimum of a chain of whole blocks), and the
    same percentage of the way from the minimum budget to keep-all's peak."""
    low, high = planopt.min_budget(prof), planopt.keep_all_peak(prof)
    points = [(f"{p:g}%", planopt.budget_from_fraction(prof, p / 100)) for p in budgets]
    points += [(f"min+{p:g}%", int(low + p / 100 * (high - low))) for p in budgets]
    return points


def method_plans(prof: planopt.Profile, budgets, seed: int):
    """(method, budget label, plan or None, note) for every planning method."""
    slow = prof.replace_layers(prof.layers, device=planning_link(prof))
    for percent, budget in budget_points(slow, budgets):
        if budget < planopt.min_budget(slow):
            yield "every method", percent, None, "below the minimum budget"
            continue
        for method in registry.planners():
            if method == "keep-all":
                continue
            try:
                sol = planopt.solve(
                    slow, budget, method, seed=seed, work_limit=WORK_LIMIT, time_limit=TIME_LIMIT
                )
            except PlanoptError as exc:
                yield method, percent, None, f"{type(exc).__name__}: {exc}"
                continue
            if sol.plan is None:
                yield method, percent, None, f"{sol.status.value}"
                continue
            plan = sol.plan
            yield (
                method,
                percent,
                Plan.build(plan.actions, plan.prefetch_at, plan.swap_wait, profile=prof),
                "",
            )


def run_model(ref, args, regime: str, rows: list[Row], skipped: list[str]) -> None:
    to_none = regime == "gradients set to None"
    batch = ref.batch(seed=1)
    name = f"{ref.name} ({ref.size})"
    prof, release = profile_with_release(
        ref.chain,
        batch,
        ref.loss_fn,
        iterations=1,
        warmup=1,
        link=INSTANT,
        grads_to_none=to_none,
        name=name,
        menus=False,  # whole layers: every planner plans them (some refuse /3 menus)
    )
    rng = random.Random(args.seed)
    plans: list[tuple[str, str | None, Plan]] = [("keep-all", None, Plan.keep_all(prof))]
    plans += [("random", None, random_plan(rng, prof)) for _ in range(args.random)]
    plans += [("run shape", None, plan) for plan in run_shape_plans(prof)]
    for method, percent, plan, note in method_plans(prof, args.budgets, args.seed):
        if plan is None:
            skipped.append(f"{name}: {method} at {percent}: {note}")
        else:
            plans.append((method, percent, plan))
    for kind, percent, plan in plans:
        schedule = planopt.simulate(prof, plan)
        m = measure(ref.chain, plan, batch, ref.loss_fn, profile=prof, iterations=0, warmup=0)
        rows.append(
            Row(
                model=name,
                regime=regime,
                kind=kind,
                budget=percent,
                plan=plan.summary(),
                predicted=schedule.peak_bytes,
                measured=m.peak_bytes,
                predicted_at=peak_operation(schedule),
                measured_at=m.peak_where,
                categories=m.peak_categories,
                actions="".join(a.value[0] for a in plan.actions),
                prefetch_at=plan.prefetch_at,
                cause=cause(prof, peak_operation(schedule), schedule.peak_bytes, m.peak_bytes),
                signed=signed_scratch_peak(schedule, release),
            )
        )


def signed_scratch_peak(schedule: Schedule, release: tuple[int, ...]) -> int:
    """The peak the same plan would have if a backward's scratch could be
    negative: while `B_t` runs, memory is `release[t]` lower than the spec's
    (what PyTorch frees node by node inside the layer before its new gradients
    peak; `profile_with_release`). Not cost model v2, which clamps the scratch
    at 0: the question this answers is whether a signed scratch in the next
    version would close the remaining gap."""
    # The level over [t, next instant) is the last one at t: at an instant the
    # frees come first and the allocations after, so the curve's levels in
    # between are never above the levels on either side, until some are lowered.
    times, levels = schedule.memory_times, schedule.memory_bytes
    last = np.append(times[1:] != times[:-1], True) if times.size else times.astype(bool)
    times, lowered = times[last], levels[last].astype(float)
    backward = [
        (int(layer), start, end)
        for kind, layer, start, end in zip(
            schedule.op_kind, schedule.op_layer, schedule.op_start, schedule.op_end, strict=True
        )
        if OP_KINDS[kind] is OpKind.BACKWARD and release[int(layer)] > 0
    ]
    for layer, start, end in backward:
        # the level after each event at an instant inside [start, end) holds within B_t
        inside = (times >= start) & (times < end)
        lowered[inside] -= release[layer]
    top = int(lowered.max()) if lowered.size else 0
    return max(top, schedule.static_bytes)


def cause(prof: planopt.Profile, predicted_at: str, predicted: int, measured: int) -> str:
    """Which tensors make the gap, when the prediction is off the target."""
    error = predicted / measured - 1
    if -UNDER <= error <= OVER:
        return ""
    kind, _, index = predicted_at.partition("_")
    if error > 0 and kind == "B" and index.isdigit():
        layer = prof.layers[int(index)]
        if layer.bwd_work_bytes == 0:
            grads = layer.input_grad_bytes + layer.param_grad_bytes
            return (
                f"B_{index} ({layer.name}): the model adds its input's gradient and its "
                f"parameter gradients ({grads} B) on top of all it reads, freed at its end; "
                "PyTorch frees the layer's saved tensors and the incoming gradient node by "
                "node inside it, so it never holds them all with the new gradients (the "
                "layer's backward scratch would be negative; the model clamps it at 0)"
            )
    return "not diagnosed"


# -- report -----------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{x * 100:+.2f}%"


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n < 2**20 else f"{n / 2**20:.2f} MiB"


def render(rows: list[Row], skipped: list[str], notes: list[str], header: list[str]) -> str:
    lines = ["# Fidelity of the memory model: predicted against measured peak", "", *header]
    for regime in dict.fromkeys(r.regime for r in rows):
        mine = [r for r in rows if r.regime == regime]
        good = sum(r.ok for r in mine)
        lines += [
            "",
            f"## Gradients {regime.removeprefix('gradients ')}",
            "",
            f"{good} of {len(mine)} plans within the target (at most {OVER:.0%} over, "
            f"{UNDER:.1%} under). Error = predicted / measured - 1.",
            "",
            f"With a signed backward scratch (not cost model v2, which clamps a layer's "
            f"backward scratch at 0; see the last section): "
            f"{sum(r.signed_ok for r in mine)} of {len(mine)} within the target, errors "
            f"{_pct(min(r.signed_error for r in mine))} to "
            f"{_pct(max(r.signed_error for r in mine))}.",
            "",
            "| model | plans | within target | largest over | largest under | "
            "keep-all predicted | keep-all measured | within, signed scratch |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for model in dict.fromkeys(r.model for r in mine):
            rs = [r for r in mine if r.model == model]
            keep = next(r for r in rs if r.kind == "keep-all")
            over = max(r.error for r in rs)
            under = min(r.error for r in rs)
            lines.append(
                f"| {model} | {len(rs)} | {sum(r.ok for r in rs)} | {_pct(max(over, 0))} | "
                f"{_pct(min(under, 0))} | {_kib(keep.predicted)} | {_kib(keep.measured)} | "
                f"{sum(r.signed_ok for r in rs)} |"
            )
        out = [r for r in mine if not r.ok]
        if out:
            lines += [
                "",
                "Plans outside the target, with where each peak is and what PyTorch held "
                "at the measured one (the tracker's categories):",
                "",
                "| model | plan | error | predicted at | measured at | held at the measured "
                "peak | cause |",
                "|---|---|---:|---|---|---|---|",
            ]
            for r in sorted(out, key=lambda r: -abs(r.error))[:30]:
                held = ", ".join(f"{k} {_kib(v)}" for k, v in r.categories.items())
                what = r.kind if r.budget is None else f"{r.kind} at {r.budget}"
                lines.append(
                    f"| {r.model} | {what}: {r.plan} | {_pct(r.error)} | {r.predicted_at} | "
                    f"{r.measured_at} | {held} | {r.cause} |"
                )
    methods = sorted({r.kind for r in rows} - {"keep-all", "random", "run shape"})
    lines += [
        "",
        "## Methods",
        "",
        "Budgets: each percentage of keep-all activation memory (the spec's convention) "
        "and the same percentage of the way from the minimum budget to keep-all's peak "
        "(`min+70%`). Plans came from: " + (", ".join(methods) or "no method") + ".",
    ]
    if skipped:
        lines += [
            "",
            f"No plan (refused, infeasible, or none found in {WORK_LIMIT:g} work units):",
            "",
        ]
        lines += [f"- {s}" for s in _grouped(skipped)]
    if notes:
        lines += ["", "## Models not run", ""] + [f"- {n}" for n in notes]
    lines += ["", "## What a signed backward scratch would close", "", *SIGNED_NOTE]
    return "\n".join(lines) + "\n"


SIGNED_NOTE = [
    "Every plan outside the target is over-predicted, at a backward step: cost "
    "model v2 allocates a layer's new gradients (its input's, and its parameters' "
    "when gradients are set to None) at the start of its backward, on top of "
    "everything the backward reads, and frees what it read at its end; its "
    "`bwd_work_bytes` is never negative. PyTorch runs a multi-node layer's "
    "backward node by node and frees each node's saved tensors and incoming "
    "gradient as the node ends, so it never holds all of them with all the new "
    "gradients. The profiler measures that difference in its counting step "
    "(`planopt.runtime.profiler.profile_with_release`: the bytes by which the "
    "layer's backward stays below the model's level with zero scratch); "
    "`signed_scratch_peak` lowers the simulated memory by it while that backward "
    "runs. The column `within, signed scratch` is how many plans a cost model "
    "with a signed backward scratch would predict within the target from the "
    "same profiles: the evidence for the next version of the spec. The planner "
    "itself follows v2 (the over-prediction is safe: no plan it calls feasible "
    "runs out of memory).",
]


def _grouped(skipped: list[str]) -> list[str]:
    """One line per (method, reason), with the models and budgets it hit."""
    groups: dict[tuple[str, str], list[str]] = {}
    for s in skipped:
        where, method_part = s.split(": ", 1)
        method, reason = method_part.split(": ", 1)
        meth, _, percent = method.partition(" at ")
        reason = reason.split(", got ")[0].split(";")[0]  # the rule, not the model
        groups.setdefault((meth, reason), []).append(f"{where} {percent}")
    return [f"{m}: {reason} ({len(w)} cases)" for (m, reason), w in groups.items()]


def figure(rows: list[Row], path: Path) -> str:
    """Predicted / measured per plan, one column per model, one colour per regime."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no figure"
    model_names = list(dict.fromkeys(r.model for r in rows))
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(model_names) + 2), 4))
    rng = random.Random(0)
    for regime, colour in zip(
        dict.fromkeys(r.regime for r in rows), ("tab:blue", "tab:orange"), strict=False
    ):
        xs, ys = [], []
        for r in rows:
            if r.regime == regime:
                xs.append(model_names.index(r.model) + rng.uniform(-0.25, 0.25))
                ys.append(r.error * 100)
        ax.scatter(xs, ys, s=10, alpha=0.6, color=colour, label=f"gradients {regime[10:]}")
    ax.axhspan(-UNDER * 100, OVER * 100, color="tab:green", alpha=0.12, label="target")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_xticks(range(len(model_names)), model_names, rotation=45, ha="right")
    ax.set_ylabel("predicted / measured peak - 1 (%)")
    ax.set_title("Memory model against the live-storage tracker (CPU), every plan")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"![predicted against measured]({Path('..') / 'figures' / path.name})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["tiny", "small"])
    parser.add_argument("--models", nargs="+", default=None, help="e.g. mlp gpt hf-gpt2")
    parser.add_argument("--random", type=int, default=20, help="random plans per model")
    parser.add_argument("--none-random", type=int, default=5, help="the same, grads to None")
    parser.add_argument("--budgets", nargs="+", type=float, default=list(BUDGETS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS / "fidelity_memory.md")
    parser.add_argument("--figure", type=Path, default=FIGURES / "fidelity_memory.png")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    chosen, notes = models(args.sizes, args.models)
    rows: list[Row] = []
    skipped: list[str] = []
    for ref in chosen:
        print(f"{ref.name} ({ref.size})", file=sys.stderr)
        run_model(ref, args, "gradients kept", rows, skipped)
        none_args = argparse.Namespace(**{**vars(args), "random": args.none_random})
        run_model(ref, none_args, "gradients set to None", rows, skipped)
    elapsed = time.perf_counter() - start
    shown = sys.argv[1:] if argv is None else argv
    header = [
        f"Generated by `python -m experiments.bench_fidelity {' '.join(shown)}` on "
        f"{platform.machine()} CPU, torch {torch.__version__}, in {elapsed:.0f} s.",
        "Predicted: the simulator on the profile measured on the same model and batch "
        "(link instantaneous, as the CPU copy engine is). Measured: `measure()`, the "
        "live-storage tracker's peak over one step under the executor (a TorchDispatchMode "
        "counting every storage allocated through the dispatcher once, from allocation to "
        "release; checked against torch's own MemTracker in the tests). On CPU the host "
        "copies of swapped tensors are the same RAM; they are filed apart, as host memory, "
        "and not counted. Method plans are made under a slower planning link (see the "
        "script) so that they mix swaps and recomputations.",
    ]
    text = render(rows, skipped, notes, header)
    text += "\n" + figure(rows, args.figure) + "\n"
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    payload = {"rows": [{**asdict(r), "error": r.error, "ok": r.ok} for r in rows]}
    args.output.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
