"""Solve time and reached overhead of PoocH and the baselines against chain length.

Run from the repository root:

    python -m experiments.bench_solvers            # writes experiments/results/solver_time.md
    python -m experiments.bench_solvers --lengths 10 30 --repeats 1 --output /tmp/t.md

Chains are generated here with `numpy.random.default_rng(seed + L)`, so every
row is reproducible: each layer gets a kind (conv/fc/add are the heavy or
join operators, bn/relu/pool the cheap ones, named so that SuperNeurons' rule
has something to read), a lognormal forward time (cheap kinds about 6x
faster), a backward time about twice the forward, and a lognormal saved size.
The device is a PCIe 3 x16 link: 12 GB/s each way, 10 us per copy. Budgets
are fractions of keep-all's activation memory (`planopt.budget_from_fraction`).
Solve time is `Solution.solve_seconds` (the method alone, not the final
re-simulation), median of `--repeats` runs; overhead is `T / T_ideal - 1`.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import planopt
from planopt import Device, Layer, Profile
from planopt.result import Status

# Column label -> (registered method, options).
METHODS: dict[str, tuple[str, dict]] = {
    "keep-all": ("keep-all", {}),
    "all-swap": ("all-swap", {}),
    "sqrt-n": ("sqrt-n", {}),
    "superneurons": ("superneurons", {}),
    "pooch": ("pooch", {}),
    "pooch retry": ("pooch", {"retry_over_budget": True}),
}
KINDS = ("conv", "bn", "relu", "pool", "fc", "add")
KIND_P = (0.35, 0.2, 0.25, 0.08, 0.07, 0.05)
CHEAP = {"bn", "relu", "pool"}
DEVICE = Device("pcie3-x16", h2d_bandwidth=12e9, d2h_bandwidth=12e9, transfer_latency=1e-5)
DEFAULT_OUTPUT = Path(__file__).parent / "results" / "solver_time.md"


def random_chain(n: int, seed: int) -> Profile:
    """A seeded `n`-layer chain (see the module docstring for the distributions)."""
    rng = np.random.default_rng(seed)
    kinds = rng.choice(len(KINDS), size=n, p=KIND_P)
    fwd = rng.lognormal(np.log(1e-3), 0.8, size=n)
    bwd_ratio = rng.lognormal(np.log(2.0), 0.3, size=n)
    sizes = rng.lognormal(np.log(32 * 2**20), 1.0, size=n).astype(np.int64)
    layers = []
    for i in range(n):
        kind = KINDS[kinds[i]]
        f = float(fwd[i]) * (0.15 if kind in CHEAP else 1.0)
        bwd = f * float(bwd_ratio[i])
        layers.append(Layer.v1(f"{kind}{i}", f, bwd, int(sizes[i]), signature=kind))
    static = int(0.2 * sizes.sum())
    return Profile(f"random-{n}-seed{seed}", DEVICE, static, tuple(layers))


@dataclass(frozen=True)
class Cell:
    seconds: float | None  # None: budget below min_budget, no method run
    status: Status
    overhead: float | None


BELOW_MIN = Cell(None, Status.INFEASIBLE, None)


def run_cell(profile: Profile, budget: float, label: str, repeats: int) -> Cell:
    method, options = METHODS[label]
    times, last = [], None
    for _ in range(repeats):
        last = planopt.solve(profile, budget, method, **options)
        times.append(last.solve_seconds)
    overhead = last.schedule.overhead if last.schedule is not None else None
    return Cell(statistics.median(times), last.status, overhead)


def fmt_time(cell: Cell) -> str:
    if cell.seconds is None:
        return "below min"
    ms = cell.seconds * 1e3
    return f"{ms:.3g} ms" if ms < 1000 else f"{cell.seconds:.2f} s"


def fmt_overhead(cell: Cell) -> str:
    if cell.seconds is None:
        return "below min"
    if cell.overhead is None:
        return "infeasible"
    return f"{100 * cell.overhead:.1f}%"


Row = tuple[int, float, float, dict[str, Cell]]


def table(rows: list[Row], methods, fmt) -> list[str]:
    head = "| L | budget | min budget | " + " | ".join(methods) + " |"
    out = [head, "|---:|---:|---:|" + "---:|" * len(methods)]
    for n, fraction, low, cells in rows:
        values = " | ".join(fmt(cells[m]) for m in methods)
        out.append(f"| {n} | {100 * fraction:.0f}% | {100 * low:.0f}% | {values} |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[10, 30, 100, 300, 1000])
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.7, 0.5, 0.3])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)

    load_before = os.getloadavg()[0]
    rows = []
    for n in args.lengths:
        profile = random_chain(n, args.seed + n)
        static = profile.static_bytes
        activation = planopt.keep_all_peak(profile) - static
        low = (planopt.min_budget(profile) - static) / activation
        for fraction in args.fractions:
            budget = planopt.budget_from_fraction(profile, fraction)
            if budget < planopt.min_budget(profile):
                cells = dict.fromkeys(args.methods, BELOW_MIN)
            else:
                cells = {m: run_cell(profile, budget, m, args.repeats) for m in args.methods}
            rows.append((n, fraction, low, cells))
            summary = ", ".join(f"{m} {fmt_time(c)} {fmt_overhead(c)}" for m, c in cells.items())
            print(f"L={n} budget={100 * fraction:.0f}% (min {100 * low:.0f}%): {summary}")

    lines = [
        "# Solver time: PoocH and the baselines",
        "",
        f"Generated by `python -m experiments.bench_solvers "
        f"--repeats {args.repeats} --seed {args.seed}` on {platform.machine()} "
        f"({platform.processor() or 'cpu'}), Python {sys.version.split()[0]}, "
        f"numpy {np.__version__}; {os.cpu_count()} CPUs, 1-minute load average "
        f"{load_before:.1f} before and {os.getloadavg()[0]:.1f} after the run (a load "
        "above the CPU count means other processes shared the machine: times are then "
        "upper bounds).",
        "",
        "Seeded random chains (`random_chain(L, seed + L)` in the script: lognormal "
        "times and sizes, layer kinds conv/fc/add/bn/relu/pool), device 12 GB/s each "
        "way with 10 us per copy. Budget = fraction of keep-all's activation memory. "
        "Time is the method's own solve time, median of the runs; overhead is "
        "`T / T_ideal - 1` of the returned plan (re-simulated), or `infeasible` when "
        "the method found no plan within the budget. `min budget` is `min_budget` as the "
        "same fraction (no plan fits below it). `pooch retry` is `pooch` with "
        "`retry_over_budget=True` (stage 2 retries, in later rounds, a tensor whose "
        "recomputation broke the budget instead of dropping it for good).",
        "",
        "## Solve time",
        "",
        *table(rows, args.methods, fmt_time),
        "",
        "## Overhead reached",
        "",
        *table(rows, args.methods, fmt_overhead),
        "",
    ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
