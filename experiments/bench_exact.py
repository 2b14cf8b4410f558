"""The exact planner: time to proven optimality against L, and the heuristics' gap to it.

Run from the repository root (about 30 minutes with the defaults):

    python -m experiments.bench_exact                 # writes experiments/results/exact_*.md
    python -m experiments.bench_exact --lengths 8 16 --seeds 1 --time-limit 20   # quick look

Instances: seeded `planopt.random_chain(L, seed=..., family="mixed",
version=2)` chains (`--chain-version 1`: the version-1 chains) and the bundled
nets small enough for the model, at budgets of 70/50/30% of keep-all
activation memory (rows below the minimum budget are dropped).
Every solve uses 2 threads and a wall-clock limit; "solve s" is the wall
time of `planopt.solve` (model building included). With `--work-limit`
every exact solve gets that many work units (`planopt.work`) and the time
limit becomes a guard: CP-SAT then runs one worker, deterministically, so a
loaded machine gives the same outcomes, and the tables quote work units to
proof beside the seconds. Per length the table
quotes the median over seeds and budgets. The gap table compares each
heuristic's simulated makespan with the exact optimum where one is proven
(`(T - T_opt) / T_opt`), else with the best proven lower bound (marked `>=`
nowhere: those rows are counted separately). The back-end table solves the
same chains with CP-SAT, HiGHS and CBC and reports whether they agree.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import planopt
from planopt import Status

RESULTS = Path(__file__).parent / "results"
LENGTHS = (8, 16, 32, 48, 64, 100)
FRACTIONS = (0.7, 0.5, 0.3)
HEURISTICS = ("greedy", "sqrt-n", "all-swap", "superneurons", "keep-all")
BUNDLED = (
    "alexnet-b128-caffe-titanx",
    "resnet50-blocks-b128-pipedream",
    "vgg16-b128-pipedream",
    "resnet50-blocks-b128-a100-pcie4-roofline",
    "vgg16-b64-a100-pcie4-roofline",
    "gpt2-b8-s1024-h100-pcie5-traced",
    "bert-base-b32-s512-h100-pcie5-traced",
)


@dataclass(frozen=True)
class Row:
    instance: str
    n: int
    fraction: float
    status: str
    seconds: float
    work: float
    makespan: float | None
    bound: float | None
    t_ideal: float
    heuristics: dict[str, float | None]

    @property
    def gap_to_bound(self) -> float | None:
        if self.makespan is None or self.bound is None:
            return None
        return max(0.0, self.makespan / self.bound - 1.0)


def run_instance(
    name: str, profile: planopt.Profile, fraction: float, limit: float, work: float | None
) -> Row | None:
    budget = planopt.budget_from_fraction(profile, fraction)
    if budget < planopt.min_budget(profile):
        return None
    start = time.monotonic()
    exact = planopt.solve(profile, budget, "exact", time_limit=limit, work_limit=work, threads=2)
    seconds = time.monotonic() - start
    heuristics = {}
    for method in HEURISTICS:
        sol = planopt.solve(profile, budget, method)
        ok = sol.status in (Status.OPTIMAL, Status.FEASIBLE)
        heuristics[method] = sol.makespan if ok else None
    return Row(
        name,
        len(profile),
        fraction,
        exact.status.value,
        seconds,
        exact.work_used,
        exact.makespan,
        exact.lower_bound,
        profile.t_ideal,
        heuristics,
    )


def _append_row(path: Path | None, row: Row) -> None:
    if path is not None:
        with path.open("a") as f:
            f.write(json.dumps(dataclasses.asdict(row)) + "\n")


def median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


def time_table(rows: list[Row], limit: float) -> list[str]:
    lines = [
        "| instances | L | solves | proven optimal | median time to proof s (all) "
        "| median work to proof units (all) | median solve s (proven) | max solve s "
        "| median gap to bound (unproven) | wall time within limit x 1.1 + 1 s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[str, int], list[Row]] = {}
    for row in rows:
        kind = "random" if row.instance.startswith("random") else row.instance
        groups.setdefault((kind, row.n), []).append(row)
    for (kind, n), group in sorted(groups.items(), key=lambda kv: (kv[0][0] != "random", kv[0][1])):
        proven = [r for r in group if r.status == "optimal"]
        unproven = [r for r in group if r.status == "feasible"]
        gaps = [100 * r.gap_to_bound for r in unproven if r.gap_to_bound is not None]
        within = sum(1 for r in group if r.seconds <= limit * 1.1 + 1.0)
        lines.append(
            f"| {kind} | {n} | {len(group)} | {len(proven)} | {_median_to_proof(group)} | "
            f"{_median_to_proof(group, lambda r: r.work)} | "
            f"{median([r.seconds for r in proven])} | {max(r.seconds for r in group):.2f} | "
            f"{(median(gaps) + ' %') if gaps else '-'} | {within}/{len(group)} |"
        )
    return lines


def _median_to_proof(group: list[Row], of=lambda r: r.seconds) -> str:
    """The median time (or work) to a proof over every solve, an unproven one counting
    as longer than any proven (so "> limit" when the median solve was unproven)."""
    times = sorted(of(r) if r.status == "optimal" else math.inf for r in group)
    mid = statistics.median(times) if times else math.inf
    return f"{mid:.2f}" if math.isfinite(mid) else "> limit"


def gap_table(rows: list[Row]) -> list[str]:
    lines = [
        "| L | budget | instances with a proven optimum | "
        + " | ".join(f"{m} gap (median / max)" for m in HEURISTICS)
        + " |",
        "|---:|---:|---:|" + "---:|" * len(HEURISTICS),
    ]
    groups: dict[tuple[int, float], list[Row]] = {}
    for row in rows:
        if row.status == "optimal":
            groups.setdefault((row.n, row.fraction), []).append(row)
    for (n, fraction), group in sorted(groups.items()):
        cells = []
        for method in HEURISTICS:
            gaps = [
                100 * (r.heuristics[method] / r.makespan - 1)
                for r in group
                if r.heuristics[method] is not None
            ]
            failed = sum(1 for r in group if r.heuristics[method] is None)
            cell = f"{statistics.median(gaps):.1f} / {max(gaps):.1f} %" if gaps else "-"
            if failed:
                cell += f" ({failed} no plan)"
            cells.append(cell)
        lines.append(f"| {n} | {fraction:.0%} | {len(group)} | " + " | ".join(cells) + " |")
    return lines


def backend_table(
    lengths: list[int], seeds: int, limit: float, version: int, work: float | None
) -> list[str]:
    lines = [
        "| L | seed | budget | CP-SAT | HiGHS | CBC | agree |",
        "|---:|---:|---:|---|---|---|---|",
    ]
    for n in lengths:
        for seed in range(seeds):
            profile = planopt.random_chain(n, seed=1000 + seed, family="mixed", version=version)
            fits = [
                r
                for r in (0.5, 0.7, 0.9)
                if planopt.budget_from_fraction(profile, r) >= planopt.min_budget(profile)
            ]
            if not fits:
                continue
            budget = planopt.budget_from_fraction(profile, fits[0])
            found = {}
            cells = []
            for backend in ("cpsat", "highs", "cbc"):
                start = time.monotonic()
                sol = planopt.solve(
                    profile,
                    budget,
                    "exact",
                    backend=backend,
                    time_limit=limit,
                    work_limit=work,
                    threads=2,
                )
                seconds = time.monotonic() - start
                found[backend] = (sol.status.value, sol.makespan)
                cell = f"{sol.status.value} {seconds:.1f} s"
                if work is not None:
                    cell += f" ({sol.work_used:.1f} units)"
                if sol.status is Status.FEASIBLE and sol.lower_bound:
                    cell += f", {100 * (sol.makespan / sol.lower_bound - 1):.1f}% over its bound"
                cells.append(cell)
            lines.append(
                f"| {n} | {seed} | {fits[0]:.0%} | " + " | ".join(cells) + f" | {_agree(found)} |"
            )
    return lines


def _agree(found: dict[str, tuple[str, float | None]]) -> str:
    """'yes' when the proven optima are equal (1e-6) and no plan beats them."""
    proven = [m for s, m in found.values() if s == "optimal"]
    if not proven:
        return "- (0 proven)"
    best = min(proven)
    plans = [m for _, m in found.values() if m is not None]
    ok = max(proven) <= best * (1 + 1e-6) and min(plans) >= best * (1 - 1e-6)
    if len(proven) < 2 and ok:
        return f"- ({len(proven)} proven, no plan beats it)"
    return f"{'yes' if ok else 'NO'} ({len(proven)} proven)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--seeds", type=int, default=3, help="random chains per length")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--backend-lengths", type=int, nargs="*", default=[6, 8, 12, 16, 32])
    parser.add_argument("--backend-time-limit", type=float, default=120.0)
    parser.add_argument("--no-bundled", action="store_true")
    parser.add_argument("--chain-version", type=int, choices=(1, 2), default=2)
    parser.add_argument(
        "--work-limit",
        type=float,
        default=None,
        help="work units per exact solve (deterministic; the time limits become guards)",
    )
    parser.add_argument("--backend-work-limit", type=float, default=None)
    parser.add_argument(
        "--backends-only",
        action="store_true",
        help="only the back-end agreement table (exact_backends.md)",
    )
    parser.add_argument("--no-backends", action="store_true", help="skip exact_backends.md")
    parser.add_argument("--first-seed", type=int, default=0, help="skip the seeds below it")
    parser.add_argument(
        "--rows",
        type=Path,
        default=None,
        help="a JSON-lines file of solved rows: appended to after each solve and the tables "
        "written from all of it, so several processes (one per length) can share the tables",
    )
    parser.add_argument("--output-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    args.output_dir.mkdir(parents=True, exist_ok=True)
    version = args.chain_version
    if not args.no_backends:
        _backends(args, version)
    if args.backends_only:
        return 0
    _instances(args, version)
    return 0


def _backends(args: argparse.Namespace, version: int) -> None:
    backends = backend_table(
        args.backend_lengths, 1, args.backend_time_limit, version, args.backend_work_limit
    )
    (args.output_dir / "exact_backends.md").write_text(
        "\n".join(
            [
                "# Exact back-ends on the same chains",
                "",
                f"Generated by `python -m experiments.bench_exact --backends-only "
                f"--backend-time-limit {args.backend_time_limit:g} "
                f"--backend-lengths {' '.join(map(str, args.backend_lengths))}"
                + (
                    f" --backend-work-limit {args.backend_work_limit:g}"
                    if args.backend_work_limit is not None
                    else ""
                )
                + f"` (chain version {version}) on "
                f"{platform.machine()}, {os.cpu_count()} CPUs; "
                + (
                    "2 threads each (CBC: one, see `solvers/backends/cbc.py`). "
                    if args.backend_work_limit is None
                    else f"{args.backend_work_limit:g} work units each (deterministic: "
                    "CP-SAT one worker; CBC one thread, see `solvers/backends/cbc.py`). "
                )
                + "Chains "
                f"`random_chain(L, seed=1000, family='mixed', version={version})`, at the "
                "first of 50/70/90% budgets that a plan can meet. A solve the limit cut "
                "short gives its plan's "
                "gap to its own proven bound. 'agree': the proven optima are equal to 1e-6 "
                "and no back-end's plan beats them.",
                "",
                *backends,
                "",
            ]
        )
    )
    print((args.output_dir / "exact_backends.md").read_text())


def _instances(args: argparse.Namespace, version: int) -> None:
    rows: list[Row] = []
    for n in args.lengths:
        for seed in range(args.first_seed, args.seeds if n <= 32 else 1):
            profile = planopt.random_chain(n, seed=seed, family="mixed", version=version)
            for fraction in FRACTIONS:
                row = run_instance(
                    f"random-{n}-{seed}", profile, fraction, args.time_limit, args.work_limit
                )
                if row is not None:
                    rows.append(row)
                    _append_row(args.rows, row)
                    print(
                        f"L={n} seed={seed} {fraction:.0%}: {row.status} {row.seconds:.1f}s",
                        flush=True,
                    )
    if not args.no_bundled:
        for name in BUNDLED:
            profile = planopt.bundled_profile(name)
            for fraction in FRACTIONS:
                row = run_instance(name, profile, fraction, args.time_limit, args.work_limit)
                if row is not None:
                    rows.append(row)
                    _append_row(args.rows, row)
                    print(f"{name} {fraction:.0%}: {row.status} {row.seconds:.1f}s", flush=True)
    if args.rows is not None:
        rows = [Row(**json.loads(line)) for line in args.rows.read_text().splitlines()]
        args.lengths = sorted({r.n for r in rows if r.instance.startswith("random")})
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    header = [
        f"Generated by `python -m experiments.bench_exact --time-limit {args.time_limit:g}"
        + (f" --work-limit {args.work_limit:g}" if args.work_limit is not None else "")
        + f" --lengths {' '.join(map(str, args.lengths))} --seeds {args.seeds}"
        + (" --no-bundled" if args.no_bundled else "")
        + f"` on {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} "
        f"CPUs (1-minute load average {load:.1f} at the end); "
        + (
            "CP-SAT with 2 threads."
            if args.work_limit is None
            else f"every exact solve on {args.work_limit:g} work units, so CP-SAT runs one "
            "worker, deterministically (the seconds depend on the machine's load, the work "
            "units do not; 1 unit is about 1 s of one core on the reference machine)."
        ),
        "",
    ]
    (args.output_dir / "exact_time.md").write_text(
        "\n".join(
            [
                "# Exact planner: time to proven optimality",
                "",
                *header,
                f"Random chains: `planopt.random_chain(L, seed, family='mixed', "
                f"version={version})`, "
                f"{args.seeds} seeds up to L = 32 and one beyond, budgets 70/50/30% "
                "(rows below the minimum budget dropped). Gap to bound = makespan / lower "
                "bound - 1 for the solves the time limit cut short.",
                "",
                *time_table(rows, args.time_limit),
                "",
                "Back-ends on the same chains: `exact_backends.md`.",
                "",
            ]
        )
    )
    (args.output_dir / "exact_gap.md").write_text(
        "\n".join(
            [
                "# The heuristics' gap to the proven optimum",
                "",
                *header,
                "Gap = T_method / T_optimal - 1 over the instances whose optimum CP-SAT proved; "
                "'no plan' counts instances where the method found no plan within the budget "
                "although one exists.",
                "",
                *gap_table(rows),
                "",
            ]
        )
    )
    print((args.output_dir / "exact_time.md").read_text())
    print((args.output_dir / "exact_gap.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
