"""Fidelity of the time model: predicted makespan against measured step time, copies included.

    python -m experiments.bench_fidelity_time                # results/fidelity_time.md
    python -m experiments.bench_fidelity_time --device cuda  # results/fidelity_time_gpu.md

(each with a .json beside it and a figure under figures/).

For every reference model (`planopt.runtime.models`, `small` on CPU), with
`torch.set_num_threads(--threads)` for profiling and measuring alike:

1. link: on CPU an emulated one, chosen so that swaps matter: copying a
   layer's products takes about as long as its forward
   (`bandwidth = sum(products) / sum(fwd) / --copy-ratio`, 50 us latency).
   The executor runs its copies on host threads over that link
   (`planopt.runtime.threadcopies.ThreadCopies`). On CUDA the real link
   (measured by the profiler) and the CUDA streams.
2. plans: keep-all, every planning method's plan at 70/50/30% of keep-all
   activation memory (solved on a first profile), `--random` random valid
   plans (seeded); identical plans are measured once and listed under
   every name that produced them.
3. rounds: `--rounds` times, a short profiler run (`planopt.runtime.profile`,
   `--profile-iterations` steps after one warm-up) then one step of every
   plan, in an order rotated every round; each plan runs in its own
   executor, warmed up once before the first round. Load on a shared
   machine then hits the profile and every plan alike.
4. predicted: the simulator on the profile whose per-layer times are the
   median over the rounds' profiles; measured: the median of the plan's
   step times (forward, loss, backward and the end of every copy; gradients
   zeroed in place outside the timing).

The error is decomposed (CPU only, where the engine records every wait):
measured waits are the seconds the compute thread spent waiting for copies
(`ThreadCopies.waits`), measured compute is the rest of the step; predicted
compute is `T_ideal` plus the recomputed forwards, predicted waits the rest
of the makespan. `late` is how far copies ended past their modelled end
(worker wake-up on a loaded machine, or a real copy slower than the link).
Target: median error within 5%, none beyond 15%. The column `first profile`
gives the error against the profile taken once before the rounds (what a
user would do), for comparison.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import platform
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

import planopt
from planopt import registry
from planopt.errors import PlanoptError
from planopt.plan import KEEP, RECOMPUTE, SWAP, Plan, need_indices
from planopt.profile import Profile
from planopt.runtime import Executor, reference_model
from planopt.runtime.models import REFERENCE_MODELS
from planopt.runtime.profiler import profile
from planopt.runtime.threadcopies import ThreadCopies
from planopt.runtime.training import prepare_grads, restored
from planopt.simulate import simulate

RESULTS = Path(__file__).parent / "results"
FIGURES = Path(__file__).parent / "figures"
BUDGETS = (70, 50, 30)
SKIP_METHODS = ("keep-all", "auto", "lower-bound", "brute-force")  # not planners / too slow
TARGET_MEDIAN, TARGET_MAX = 0.05, 0.15
PLACEHOLDER = planopt.Device("placeholder", 1e9, 1e9, 0.0)


@dataclass
class Row:
    """One distinct plan of one model: its names, prediction, measurement and error parts."""

    model: str
    names: list[str]
    summary: str
    predicted: float
    predicted_first: float
    predicted_compute: float
    measured: float = math.nan
    measured_waits: float = math.nan
    late: float = math.nan
    samples: list[float] = field(default_factory=list)

    @property
    def error(self) -> float:
        return self.measured / self.predicted - 1

    @property
    def error_first(self) -> float:
        return self.measured / self.predicted_first - 1

    @property
    def compute_part(self) -> float:
        """Error from compute: (measured - predicted compute) / predicted makespan."""
        return (self.measured - self.measured_waits - self.predicted_compute) / self.predicted

    @property
    def wait_part(self) -> float:
        predicted_waits = self.predicted - self.predicted_compute
        return (self.measured_waits - predicted_waits) / self.predicted

    @property
    def verdict(self) -> str:
        if math.isnan(self.measured_waits):
            return "ok" if abs(self.error) <= TARGET_MAX else "miss"
        if abs(self.error) <= TARGET_MEDIAN:
            return "ok"
        compute, waits = self.compute_part, self.wait_part
        if abs(compute) >= abs(waits):
            return f"compute {'slower' if compute > 0 else 'faster'}"
        if waits > 0 and self.late >= 0.5 * waits * self.predicted:
            return "waits: copies late"
        return f"waits {'longer' if waits > 0 else 'shorter'}"


def random_plan(rng: random.Random, prof: Profile) -> Plan:
    """A random valid plan (the action mix itself drawn at random)."""
    n = len(prof)
    actions = rng.choices(
        (KEEP, SWAP, RECOMPUTE), weights=[rng.random() + 0.05 for _ in range(3)], k=n
    )
    need = need_indices(actions, prof)
    prefetch: list[int | None] = [None] * n
    waits: list[int | None] = [None] * n
    for i, a in enumerate(actions):
        if a is SWAP:
            prefetch[i] = rng.randint(need[i], n - 1)
            if i < n - 1 and rng.random() < 0.4:
                waits[i] = rng.randint(i + 1, n - 1)
    return Plan.build(actions, prefetch, waits, profile=prof)


def emulated_link(prof: Profile, ratio: float) -> planopt.Device:
    """A link over which a layer's products take about `ratio` times its forward."""
    products = sum(layer.out_bytes + layer.saved_bytes for layer in prof.layers)
    forward = sum(layer.fwd for layer in prof.layers)
    bandwidth = products / forward / ratio
    return planopt.Device(
        f"emulated ({bandwidth / 1e6:.0f} MB/s, 50 us)", bandwidth, bandwidth, 50e-6
    )


def _key(plan: Plan) -> tuple:
    return (tuple(plan.actions), tuple(plan.prefetch_at), tuple(plan.swap_wait))


def _plans(prof: Profile, args) -> dict[tuple, tuple[list[str], Plan]]:
    methods = args.methods or [m for m in registry.available() if m not in SKIP_METHODS]
    plans: dict[tuple, tuple[list[str], Plan]] = {}

    def add(name: str, plan: Plan) -> None:
        plans.setdefault(_key(plan), ([], plan))[0].append(name)

    add("keep-all", Plan.keep_all(prof))
    for percent in args.budgets:
        for method in methods:
            try:
                solution = planopt.solve(prof, f"{percent}%", method, time_limit=args.time_limit)
            except PlanoptError as exc:  # a method that refuses this profile
                print(f"  {method} at {percent}%: {type(exc).__name__}", file=sys.stderr)
                continue
            if solution.plan is not None:
                add(f"{method}@{percent:g}%", solution.plan)
    rng = random.Random(args.seed)
    for k in range(args.random):
        add(f"random-{k}", random_plan(rng, prof))
    return plans


def _median_profile(first: Profile, profiles: list[Profile]) -> Profile:
    """`first` with per-layer times the median over `profiles` (same chain, same batch)."""
    layers = [
        dataclasses.replace(
            layer,
            fwd=statistics.median(p.layers[i].fwd for p in profiles),
            bwd=statistics.median(p.layers[i].bwd for p in profiles),
        )
        for i, layer in enumerate(first.layers)
    ]
    return first.replace_layers(layers)


def _compute_seconds(prof: Profile, plan: Plan) -> float:
    """Compute-stream busy time: every forward and backward, plus each recomputed forward."""
    return prof.t_ideal + sum(
        layer.fwd for layer, a in zip(prof.layers, plan.actions, strict=True) if a is RECOMPUTE
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def study(name: str, args, device: torch.device) -> tuple[dict, list[Row]]:
    ref = reference_model(name, args.size, seed=args.seed)
    chain = ref.chain.to(device)
    x, y = ref.batch(seed=args.seed + 1, device=device)
    cpu = device.type == "cpu"
    kw = dict(warmup=2, name=f"{name}-{args.size}", progress=False)
    first = profile(
        chain, (x, y), ref.loss_fn, iterations=5, link=PLACEHOLDER if cpu else None, **kw
    )
    link = emulated_link(first, args.copy_ratio) if cpu else None
    if cpu:
        first = first.replace_layers(first.layers, device=link)
    plans = _plans(first, args)
    executors = [
        Executor(chain, plan, profile=first, loss_fn=ref.loss_fn, link=link)
        for _, plan in plans.values()
    ]
    samples: list[list[tuple[float, float, float]]] = [[] for _ in executors]

    def step(k: int) -> tuple[float, float, float]:
        ex = executors[k]
        for engine in ex.engines.values():
            if isinstance(engine, ThreadCopies):
                engine.clear_records()
        prepare_grads(chain, False)
        _sync(device)
        start = time.perf_counter()
        with ex:
            loss = ex(x, y)
            loss.backward()
        ex.synchronize()
        _sync(device)
        seconds = time.perf_counter() - start
        waits = late = math.nan
        for engine in ex.engines.values():
            if isinstance(engine, ThreadCopies):
                waits = sum(w.seconds for w in engine.waits)
                late = sum(max(0.0, r.late) for r in engine.records)
        if math.isnan(waits) and cpu:
            waits = late = 0.0  # no copy in this plan
        return seconds, waits, late

    profiles: list[Profile] = []
    started = time.perf_counter()
    with restored(chain, device):
        for k in range(len(executors)):
            step(k)  # warm-up, and the first step's check of the products
        for r in range(args.rounds):
            profiles.append(
                profile(
                    chain,
                    (x, y),
                    ref.loss_fn,
                    iterations=args.profile_iterations,
                    link=link,
                    **{**kw, "warmup": 1},
                )
            )
            order = list(range(len(executors)))
            shift = r % len(order)
            for k in order[shift:] + order[:shift]:
                samples[k].append(step(k))
    for ex in executors:
        ex.release_host_memory()
    final = _median_profile(first, profiles)
    rows = []
    for (names, plan), got in zip(plans.values(), samples, strict=True):
        scored = Plan.build(plan.actions, plan.prefetch_at, plan.swap_wait, profile=final)
        seconds = [s for s, _, _ in got]
        mid = sorted(range(len(got)), key=lambda j: seconds[j])[len(got) // 2]
        rows.append(
            Row(
                model=name,
                names=names,
                summary=plan.summary(),
                predicted=simulate(final, scored).makespan,
                predicted_first=simulate(first, plan).makespan,
                predicted_compute=_compute_seconds(final, plan),
                measured=statistics.median(seconds),
                measured_waits=got[mid][1],
                late=got[mid][2],
                samples=seconds,
            )
        )
    info = dict(
        model=name,
        layers=len(first),
        link=link.name if link else first.device.name,
        t_ideal=final.t_ideal,
        t_ideal_first=first.t_ideal,
        seconds=time.perf_counter() - started,
        plans=len(rows),
    )
    return info, rows


# -- report --------------------------------------------------------------------------


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value * 100:+.1f}%"


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value * 1e3:.1f}"


def _names(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f" (+{len(names) - 4})" if len(names) > 4 else "")


def report(infos: list[dict], rows: list[Row], args, device: torch.device) -> str:
    errors = [abs(r.error) for r in rows]
    firsts = [abs(r.error_first) for r in rows]
    lines = [
        "# Timing fidelity: predicted makespan against measured step time",
        "",
        f"Written by `python -m experiments.bench_fidelity_time {' '.join(sys.argv[1:])}`"
        f" on {platform.machine()} ({platform.system()}), torch {torch.__version__}, "
        f"device {device}, {torch.get_num_threads()} torch thread(s) for profiling and measuring, "
        f"{args.rounds} rounds ({args.profile_iterations} profiled steps and one step of every "
        f"plan each), sizes `{args.size}`, link copy/forward ratio {args.copy_ratio}.",
        "",
        "How to read it: `error` = measured / predicted - 1, the prediction from the median "
        "profile over the rounds; `first profile`: the same against one profile taken before "
        "the rounds. `compute` and `waits` split the error (they sum to it): the compute "
        "thread's time outside waits against `T_ideal` plus recomputed forwards, and its "
        "waits for copies against the makespan's remainder. `late`: summed time copies ended "
        "past their modelled end. `verdict` names the larger part where the error exceeds 5%.",
        "",
        "## Summary",
        "",
        f"Target: median |error| within {TARGET_MEDIAN:.0%}, none beyond {TARGET_MAX:.0%}.",
        "",
        "| model | layers | link | T_ideal ms (first profile) | plans | median abs error "
        "| max abs error | within 5% | within 15% | median (first profile) | seconds |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for info in infos:
        mine = [r for r in rows if r.model == info["model"]]
        errs = [abs(r.error) for r in mine]
        lines.append(
            f"| {info['model']} | {info['layers']} | {info['link']} | "
            f"{info['t_ideal'] * 1e3:.1f} ({info['t_ideal_first'] * 1e3:.1f}) | {len(mine)} | "
            f"{statistics.median(errs):.1%} | {max(errs):.1%} | "
            f"{sum(e <= TARGET_MEDIAN for e in errs)}/{len(errs)} | "
            f"{sum(e <= TARGET_MAX for e in errs)}/{len(errs)} | "
            f"{statistics.median(abs(r.error_first) for r in mine):.1%} | {info['seconds']:.0f} |"
        )
    lines.append(
        f"| **all** | | | | {len(rows)} | **{statistics.median(errors):.1%}** | "
        f"**{max(errors):.1%}** | {sum(e <= TARGET_MEDIAN for e in errors)}/{len(errors)} | "
        f"{sum(e <= TARGET_MAX for e in errors)}/{len(errors)} | "
        f"{statistics.median(firsts):.1%} | |"
    )
    lines += [
        "",
        "## Every plan",
        "",
        "| model | plan (who produced it) | actions | predicted ms | measured ms | error "
        "| first profile | compute | waits | late ms | verdict |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.model} | {_names(r.names)} | {r.summary} | {_ms(r.predicted)} | "
            f"{_ms(r.measured)} | {_pct(r.error)} | {_pct(r.error_first)} | "
            f"{_pct(r.compute_part)} | {_pct(r.wait_part)} | {_ms(r.late)} | {r.verdict} |"
        )
    return "\n".join(lines) + "\n"


def figure(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    models = sorted({r.model for r in rows})
    for model in models:
        mine = [r for r in rows if r.model == model]
        ax.scatter(
            [r.predicted * 1e3 for r in mine], [r.measured * 1e3 for r in mine], s=14, label=model
        )
    lo = min(min(r.predicted, r.measured) for r in rows) * 1e3 * 0.9
    hi = max(max(r.predicted, r.measured) for r in rows) * 1e3 * 1.1
    xs = [lo, hi]
    ax.plot(xs, xs, color="black", lw=0.8, label="measured = predicted")
    for band, style in ((TARGET_MEDIAN, "--"), (TARGET_MAX, ":")):
        ax.plot(xs, [v * (1 + band) for v in xs], "k" + style, lw=0.6)
        ax.plot(xs, [v * (1 - band) for v in xs], "k" + style, lw=0.6, label=f"±{band:.0%}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted makespan (ms)")
    ax.set_ylabel("measured step time (ms)")
    ax.set_title("Timing fidelity (CPU, emulated link)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", nargs="+", default=list(REFERENCE_MODELS))
    parser.add_argument(
        "--size", default=None, help="model size (default: small on CPU, gpu on CUDA)"
    )
    parser.add_argument("--budgets", nargs="+", type=float, default=list(BUDGETS))
    parser.add_argument("--methods", nargs="+", default=None, help="default: every planner")
    parser.add_argument("--random", type=int, default=4, help="random plans per model")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile-iterations", type=int, default=3)
    parser.add_argument("--copy-ratio", type=float, default=1.0, help="copy time / forward time")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (both phases)")
    parser.add_argument("--time-limit", type=float, default=10.0, help="per solve, seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--figure", type=Path, default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    args.size = args.size or ("gpu" if cuda else "small")
    suffix = "_gpu" if cuda else ""
    output = args.output or RESULTS / f"fidelity_time{suffix}.md"
    fig = args.figure or FIGURES / f"fidelity_time{suffix}.png"
    torch.set_num_threads(args.threads)
    infos, rows = [], []
    for name in args.models:
        print(f"{name}: profiling, planning, measuring", file=sys.stderr)
        info, mine = study(name, args, device)
        infos.append(info)
        rows.extend(mine)
        errs = [abs(r.error) for r in mine]
        print(
            f"  {len(mine)} plans, median |error| {statistics.median(errs):.1%}, "
            f"max {max(errs):.1%}, {info['seconds']:.0f} s",
            file=sys.stderr,
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report(infos, rows, args, device))
    output.with_suffix(".json").write_text(
        json.dumps({"models": infos, "rows": [asdict(r) for r in rows]}, indent=1) + "\n"
    )
    figure(rows, fig)
    print(f"wrote {output} and {fig}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
