"""Fidelity of the time model: predicted makespan against measured step time, copies included.

    python -m experiments.bench_fidelity_time                # results/fidelity_time.md
    python -m experiments.bench_fidelity_time --device cuda  # results/fidelity_time_gpu.md

(on a GPU session, `python -m experiments.gpu_run` writes the time table
with the others, under a deadline: results/gpu/fidelity_time_gpu.md)

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
   `--profile-iterations` steps after one warm-up) then, for every plan in
   an order rotated every round, one warm-up step and `--steps` timed
   steps back to back, as the profiler times its steps (a step that follows
   another plan's runs with colder caches). Each plan runs in its own
   executor. Load on a shared machine then hits the profile and every plan
   alike.
4. predicted: the simulator on the profile whose per-layer times are the
   median over the rounds' profiles; measured: the median step (forward,
   loss, backward and the end of every copy; gradients zeroed in place
   outside the timing).

NOTE (load): this machine is shared; its load changes a step's wall time by
a factor of two within minutes, and a sum of per-layer medians leaves out
the preemptions a whole step suffers. On CPU the rounds' profiles are
therefore timed with the compute thread's CPU time (`profile(...,
timer="thread")`), and a step is measured as that thread's CPU time plus
its waits for copies (wall clock, as `ThreadCopies` records them): neither
counts the time the thread was runnable but not running. The wall-clock
error against one wall-clock profile taken first (`raw`, what a user gets
without care) and the share of the step lost to load (`load`) are given
beside it.

The error is decomposed (CPU only, where the engine records every wait):
`compute`, the compute thread's CPU time against `T_ideal` plus the
recomputed forwards, and `waits`, its waits for copies against the rest of
the makespan; `copying` is the workers' real copy time in the step (it
runs beside the compute thread and shares its caches and memory
bandwidth). Target: median error within 5%, none beyond 15%.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass
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
# Batch sizes on CPU where `small`'s default makes layers of a millisecond or
# two, which the executor's per-layer Python (hooks, packing, bookkeeping)
# would distort by 10-20%; on a GPU that Python overlaps the asynchronous
# kernels. Larger batches keep the layers' own work the larger part.
CPU_BATCH = {"vgg": 64, "resnet": 32}


@dataclass
class Row:
    """One distinct plan of one model: its names, prediction, measurement and error parts.

    `measured`, `measured_compute`, `measured_waits` and `load` are those of
    one step, the median one by `measured` (the lower median), so that the
    error's parts sum to it.
    """

    model: str
    names: list[str]
    summary: str
    predicted: float  # from the rounds' median profile (CPU: thread CPU time)
    predicted_compute: float
    predicted_raw: float  # from the profile taken once before, wall clock
    measured: float  # CPU: compute thread's CPU time + waits; CUDA: wall clock
    measured_compute: float
    measured_waits: float
    measured_wall: float  # the median step's wall time
    wall_median: float  # median wall time over the steps
    copying: float
    steps: int

    @property
    def error(self) -> float:
        return self.measured / self.predicted - 1

    @property
    def raw_error(self) -> float:
        return self.wall_median / self.predicted_raw - 1

    @property
    def load(self) -> float:
        """Share of the median step's wall time the compute thread was runnable, not running."""
        return (self.measured_wall - self.measured) / self.measured_wall

    @property
    def compute_part(self) -> float:
        """Error from compute: (measured - predicted compute) / predicted makespan."""
        return (self.measured_compute - self.predicted_compute) / self.predicted

    @property
    def wait_part(self) -> float:
        predicted_waits = self.predicted - self.predicted_compute
        return (self.measured_waits - predicted_waits) / self.predicted

    @property
    def verdict(self) -> str:
        if abs(self.error) <= TARGET_MEDIAN:
            return "ok"
        if math.isnan(self.measured_waits):
            return "miss"
        compute, waits = self.compute_part, self.wait_part
        if abs(compute) >= abs(waits):
            return f"compute {'slower' if compute > 0 else 'faster'}"
        return f"waits {'longer' if waits > 0 else 'shorter'}"


@dataclass(frozen=True)
class Sample:
    """One timed step: what the model's time is measured as, and its parts."""

    measured: float  # CPU: compute + waits; CUDA: wall
    compute: float  # the compute thread's CPU time (CPU)
    waits: float  # the compute thread's waits for copies (CPU)
    copying: float  # the workers' real copies, summed (CPU)
    wall: float


def keep_freed_memory() -> bool:
    """Make glibc's malloc keep freed memory, as a GPU's caching allocator does.

    NOTE (page faults): glibc returns large freed blocks to the OS (mmap
    threshold, heap trim) and page-faults them back in on the next
    allocation. A plan that swaps or recomputes frees and allocates more
    than keep-all, so on CPU it paid 1 ms per copy of a resnet-small
    activation in page faults, a cost no GPU pays (the caching allocator
    keeps its blocks). With both thresholds at 1 GiB, profiling and
    measuring alike keep their memory. Returns whether it applied (glibc only).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    return bool(libc.mallopt(m_mmap_threshold, 1 << 30) and libc.mallopt(m_trim_threshold, 1 << 30))


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


def _plans(
    prof: Profile, args, missing: dict[str, list[str]]
) -> dict[tuple, tuple[list[str], Plan]]:
    """Distinct plans by who produced them; `missing` gets, per outcome, the solves with none."""
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
                missing.setdefault(type(exc).__name__, []).append(f"{method}@{percent:g}%")
                continue
            if solution.plan is not None:
                add(f"{method}@{percent:g}%", solution.plan)
            else:
                missing.setdefault(solution.status.value, []).append(f"{method}@{percent:g}%")
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
    cpu = device.type == "cpu"
    batch_size = CPU_BATCH.get(name) if cpu and args.size == "small" else None
    x, y = ref.batch(seed=args.seed + 1, device=device, batch_size=batch_size)
    # Whole layers (menus=False): every planner plans them (some refuse /3 menus).
    kw = dict(
        name=f"{name}-{args.size}",
        progress=False,
        link=PLACEHOLDER if cpu else None,
        menus=False,
    )
    # The wall-clock profile a user would take (the `raw` column), and on CPU
    # one on the compute thread's clock, which the link is sized from.
    first = profile(chain, (x, y), ref.loss_fn, iterations=5, warmup=2, **kw)
    timer = "thread" if cpu else "wall"
    sizing = profile(chain, (x, y), ref.loss_fn, iterations=5, warmup=1, timer=timer, **kw)
    link = emulated_link(sizing, args.copy_ratio) if cpu else None
    if cpu:
        first = first.replace_layers(first.layers, device=link)
        kw["link"] = link
    missing: dict[str, list[str]] = {}
    plans = _plans(first, args, missing)
    clocks = ("thread", "wall") if cpu else ("wall",)
    executors = {
        clock: [
            Executor(chain, plan, profile=first, loss_fn=ref.loss_fn, link=link, link_clock=clock)
            for _, plan in plans.values()
        ]
        for clock in clocks
    }
    samples = {clock: [[] for _ in plans] for clock in clocks}

    def step(ex: Executor) -> Sample:
        for engine in ex.engines.values():
            if isinstance(engine, ThreadCopies):
                engine.clear_records()
        prepare_grads(chain, False)
        _sync(device)
        start, cpu_start = time.perf_counter(), time.thread_time()
        with ex:
            loss = ex(x, y)
            loss.backward()
        ex.synchronize()
        _sync(device)
        wall, cpu_time = time.perf_counter() - start, time.thread_time() - cpu_start
        if not cpu:
            return Sample(wall, wall, math.nan, math.nan, wall)
        waits = copying = 0.0  # no copy in this plan
        for engine in ex.engines.values():
            if isinstance(engine, ThreadCopies):
                waits = sum(w.seconds for w in engine.waits)
                copying = sum(r.copy_seconds for r in engine.records)
        return Sample(cpu_time + waits, cpu_time, waits, copying, wall)

    profiles: list[Profile] = []
    started = time.perf_counter()
    with restored(chain, device):
        for clock in clocks:
            for ex in executors[clock]:
                step(ex)  # warm-up, and the first step's check of the products
        for r in range(args.rounds):
            profiles.append(
                profile(
                    chain,
                    (x, y),
                    ref.loss_fn,
                    iterations=args.profile_iterations,
                    warmup=1,
                    timer=timer,
                    **kw,
                )
            )
            order = list(range(len(plans)))
            shift = r % len(order)
            for k in order[shift:] + order[:shift]:
                for clock in clocks:
                    ex = executors[clock][k]
                    step(ex)  # warm-up: the plan's own buffers and caches, as the profiler's
                    steps = args.steps if clock == clocks[0] else 1  # `raw`: one a round
                    samples[clock][k].extend(step(ex) for _ in range(steps))
    for clock in clocks:
        for ex in executors[clock]:
            ex.release_host_memory()
    final = _median_profile(first, profiles)
    rows = []
    for k, (names, plan) in enumerate(plans.values()):
        scored = Plan.build(plan.actions, plan.prefetch_at, plan.swap_wait, profile=final)
        got = samples[clocks[0]][k]
        mid = sorted(got, key=lambda sample: sample.measured)[(len(got) - 1) // 2]
        rows.append(
            Row(
                model=name,
                names=names,
                summary=plan.summary(),
                predicted=simulate(final, scored).makespan,
                predicted_compute=_compute_seconds(final, plan),
                predicted_raw=simulate(first, plan).makespan,
                measured=mid.measured,
                measured_compute=mid.compute,
                measured_waits=mid.waits,
                measured_wall=mid.wall,
                wall_median=statistics.median(sample.wall for sample in samples["wall"][k]),
                copying=mid.copying,
                steps=len(got),
            )
        )
    info = dict(
        model=name,
        batch=int(x.shape[0]),
        layers=len(first),
        link=link.name if link else first.device.name,
        t_ideal=final.t_ideal,
        t_ideal_first=first.t_ideal,
        seconds=time.perf_counter() - started,
        plans=len(rows),
        min_budget=(planopt.min_budget(first) - first.static_bytes)
        / (planopt.keep_all_peak(first) - first.static_bytes),
        missing=missing,
    )
    return info, rows


# -- report --------------------------------------------------------------------------


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value * 100:+.1f}%"


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value * 1e3:.1f}"


def _names(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f" (+{len(names) - 4})" if len(names) > 4 else "")


def _summary_line(label: str, rows: list[Row], extra: str) -> str:
    errs = [abs(r.error) for r in rows]
    raw = [abs(r.raw_error) for r in rows]
    return (
        f"| {label} | {extra} | {len(rows)} | {statistics.median(errs):.1%} | {max(errs):.1%} | "
        f"{sum(e <= TARGET_MEDIAN for e in errs)}/{len(errs)} | "
        f"{sum(e <= TARGET_MAX for e in errs)}/{len(errs)} | "
        f"{statistics.median(raw):.1%} | {max(raw):.1%} | "
        f"{statistics.median(r.load for r in rows):.0%} |"
    )


def report(infos: list[dict], rows: list[Row], args, device: torch.device) -> str:
    cpu = device.type == "cpu"
    lines = [
        "# Timing fidelity: predicted makespan against measured step time",
        "",
        f"Written by `python -m experiments.bench_fidelity_time {' '.join(sys.argv[1:])}`"
        f" on {platform.machine()} ({platform.system()}, {os.cpu_count()} cores shared with "
        f"other jobs), torch {torch.__version__}, device {device}, {torch.get_num_threads()} "
        "torch thread(s) for profiling and measuring, "
        f"{args.rounds} rounds ({args.profile_iterations} profiled steps, then for every plan "
        f"one warm-up and {args.steps} timed steps), sizes `{args.size}`, "
        f"link copy/forward ratio {args.copy_ratio}; "
        + (
            "glibc malloc keeps freed memory (mallopt: mmap and trim thresholds 1 GiB), as a "
            "GPU's caching allocator does (`keep_freed_memory`)."
            if getattr(args, "kept_memory", False)
            else "the C allocator as it is."
        ),
        "",
        "How to read it:",
        "",
        "* `error` = measured / predicted - 1. "
        + (
            "Measured: the compute thread's CPU time (`time.thread_time`) plus its waits for "
            "copies (wall clock, from `ThreadCopies.waits`); predicted: the simulator on the "
            "profile whose per-layer times are the median, over the rounds, of the runtime "
            'profiler\'s `timer="thread"` (the same CPU clock). Both leave out the time the '
            "compute thread was runnable but not running: other processes' load, not the plan."
            if cpu
            else "Measured: the step's wall time; predicted: the simulator on the median profile."
        ),
        "* `raw` = the median step's wall time against one wall-clock profile taken before "
        "the rounds: what a user on this machine gets with no care for its load.",
        "* `load`: the share of the median step's wall time the compute thread was runnable "
        "but not running (wall - CPU time - waits).",
        "* `compute` and `waits` split `error` (they sum to it): the compute thread's CPU "
        "time against `T_ideal` plus the recomputed forwards, and its waits for copies "
        "against the rest of the makespan. `copying`: the workers' real copies in the "
        "step, which run beside the compute thread and share its caches and memory "
        "bandwidth. `verdict` names the larger part where |error| > 5%.",
        "",
        "## Summary",
        "",
        f"Target: median |error| within {TARGET_MEDIAN:.0%}, none beyond {TARGET_MAX:.0%}.",
        "",
        "| model | batch, layers, link, T_ideal ms (wall profile), seconds | plans "
        "| median abs error | max abs error | within 5% | within 15% "
        "| median abs raw | max abs raw | load |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for info in infos:
        mine = [r for r in rows if r.model == info["model"]]
        extra = (
            f"batch {info['batch']}, {info['layers']} layers, {info['link']}, "
            f"{info['t_ideal'] * 1e3:.1f} ({info['t_ideal_first'] * 1e3:.1f}), "
            f"{info['seconds']:.0f} s"
        )
        lines.append(_summary_line(info["model"], mine, extra))
    lines.append(_summary_line("**all**", rows, ""))
    if cpu:
        lines += ["", "Where the error is (median over the plans of each kind):", ""]
        kinds = {
            "keep-all": [r for r in rows if "keep-all" in r.names],
            "plans with swaps": [r for r in rows if "swap 0" not in r.summary],
            "plans with recomputations": [r for r in rows if "recompute 0" not in r.summary],
        }
        for kind, mine in kinds.items():
            if mine:
                error, compute, waits = (
                    statistics.median(getattr(r, part) for r in mine)
                    for part in ("error", "compute_part", "wait_part")
                )
                lines.append(
                    f"* {kind} ({len(mine)}): error {_pct(error)}, compute {_pct(compute)}, "
                    f"waits {_pct(waits)}"
                )
    lines += [
        "",
        "Solves that gave no plan to run (`infeasible`: the budget is below the least any "
        "plan needs, given as a share of keep-all activation memory; `timeout`: no plan "
        f"within the {args.time_limit:g} s limit):",
        "",
    ]
    for info in infos:
        outcomes = "; ".join(
            f"{outcome}: {', '.join(names)}" for outcome, names in info["missing"].items()
        )
        lines.append(
            f"* {info['model']} (least budget {info['min_budget']:.0%}): {outcomes or 'none'}"
        )
    lines += [
        "",
        "## Every plan",
        "",
        "| model | plan (who produced it) | actions | predicted ms | measured ms | error "
        "| raw | load | compute | waits | copying ms | verdict |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.model} | {_names(r.names)} | {r.summary} | {_ms(r.predicted)} | "
            f"{_ms(r.measured)} | {_pct(r.error)} | {_pct(r.raw_error)} | {r.load:.0%} | "
            f"{_pct(r.compute_part)} | {_pct(r.wait_part)} | {_ms(r.copying)} | {r.verdict} |"
        )
    return "\n".join(lines) + "\n"


def figure(rows: list[Row], path: Path, title: str, ylabel: str) -> None:
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
    ax.set_ylabel(ylabel)
    ax.set_title(title)
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
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2, help="timed steps per plan and round")
    parser.add_argument("--profile-iterations", type=int, default=3)
    parser.add_argument("--copy-ratio", type=float, default=1.0, help="copy time / forward time")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (both phases)")
    parser.add_argument("--time-limit", type=float, default=10.0, help="per solve, seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--allocator-default",
        action="store_true",
        help="leave glibc's malloc as it is (default: keep freed memory, see keep_freed_memory)",
    )
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
    args.kept_memory = not cuda and not args.allocator_default and keep_freed_memory()
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
    figure(
        rows,
        fig,
        f"Timing fidelity ({'emulated link, CPU' if not cuda else device})",
        "measured step (ms)" if cuda else "measured step: CPU time + waits (ms)",
    )
    print(f"wrote {output} and {fig}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
