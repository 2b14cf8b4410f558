"""What a work unit costs per method, plan quality against work, the same plan quiet and loaded.

Run from the repository root (about 15 minutes of CPU):

    python -m experiments.bench_work                 # writes experiments/results/work_limits.md
    python -m experiments.bench_work --methods lns --work 0.5 2 --output /tmp/w.md
    python -m experiments.bench_work --no-calibration   # the second table only
    python -m experiments.work_rates --json /tmp/rates.jsonl   # then, without solving again:
    python -m experiments.bench_work --calibration-from /tmp/rates.jsonl --calibration-only

The first table is the calibration check: every registered method on the
nets and work limits of `experiments.work_rates` (CPU-seconds of the
method's call, its child processes included, per work unit it reported),
summarised per method against the goal of one CPU-second a unit, +-30%.

For each method and work limit it solves a 300-layer chain
(`planopt.random_chain(300, seed=7, family="mixed")`, the `--budget` of
keep-all's activation memory, seed 0) twice: once on the machine as it is,
once while `--load` processes spin on the CPU. It records the overhead
reached, the work counted, the wall time of each run, and whether the two
plans are identical (they must be: with a work limit and no time limit a
method's path depends on counts, not on the clock). The wall-time ratio of
the loaded to the quiet run shows what the load cost; the plans do not
change.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import planopt
from experiments import work_rates
from planopt import registry
from planopt.testing.load import busy_cores
from planopt.work import METHOD_RATES, SIZE_FACTORS

DEFAULT_OUTPUT = Path(__file__).parent / "results" / "work_limits.md"


def timed(profile, budget, method, work):
    # Methods that cap the net's size (exact's max_layers) are told this net's size.
    sized = "max_layers" in registry.get(method).options()
    options = {"max_layers": len(profile.layers)} if sized else {}
    began = time.perf_counter()
    sol = planopt.solve(profile, budget, method, work_limit=work, seed=0, **options)
    return sol, time.perf_counter() - began


TOLERANCE = 0.3  # the goal: one CPU-second a unit, within 30%
PLAN_SECTION = "## Plan quality and wall time against work, quiet and loaded"


def calibration(methods: list[str] | None, saved: Path | None = None) -> list[str]:
    """The calibration table's lines: every case, then a summary per method (the rows
    of `saved`, a JSON-lines file of `experiments.work_rates`, where given)."""
    if saved is not None:
        rows = [json.loads(line) for line in saved.read_text().splitlines() if line.strip()]
        rows = [r for r in rows if not methods or r["method"] in methods]
    else:
        rows = work_rates.run(methods, log=lambda r: print(json.dumps(r), flush=True))
    lines = [
        "## CPU-seconds per work unit, per method",
        "",
        "Each method's raw counts (simulations, back-end work, labels, ...) are "
        "multiplied by its own rate into work units: `planopt.work.METHOD_RATES`, "
        "times a factor of the net's size for the methods in `SIZE_FACTORS` (the "
        "`rate` column below: the rate the solve ran at). CPU is that of the "
        "method's call (`os.times()`: the process and its children: CP-SAT runs "
        "in a forked child, CBC as a subprocess), each solve in a fresh fork of a "
        "warmed-up process (no caches from an earlier solve), measured by "
        "`experiments.work_rates` at a 40% budget; the goal is 1 CPU-second a "
        "unit, within 30%.",
        "",
        "| method | rate (units per count) | solves | CPU s per unit: min | median | max "
        "| within 0.7-1.3 |",
        "|---|---|---|---|---|---|---|",
    ]
    by_method: dict[str, list[float]] = {}
    for r in rows:
        if r["cpu_per_unit"] is not None:
            by_method.setdefault(r["method"], []).append(r["cpu_per_unit"])
    for method, ratios in by_method.items():
        ratios.sort()
        median = statistics.median(ratios)
        ok = all(1 - TOLERANCE <= x <= 1 + TOLERANCE for x in ratios)
        rates = sorted({r["rate"] for r in rows if r["method"] == method})
        rate = f"{METHOD_RATES[method]:g}"
        if method in SIZE_FACTORS:
            rate += " x its size factor"
        if rates[0] != METHOD_RATES[method] or rates[-1] != METHOD_RATES[method]:
            rate += f" (ran at {rates[0]:.3g}-{rates[-1]:.3g})"
        lines.append(
            f"| {method} | {rate} | {len(ratios)} | {ratios[0]:.2f} "
            f"| {median:.2f} | {ratios[-1]:.2f} | {'yes' if ok else '**no**'} |"
        )
    lines += [
        "",
        "| method | net | layers | work limit | status | rate | counts | units | CPU s "
        "| CPU s per unit |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        per = "-" if r["cpu_per_unit"] is None else f"{r['cpu_per_unit']:.2f}"
        limit = "none" if r["work_limit"] >= 1e5 else f"{r['work_limit']:g}"
        lines.append(
            f"| {r['method']} | `{r['net']}` | {r['layers']} | {limit} | {r['status']} "
            f"| {r['rate']:.3g} | {r['raw']:.4g} | {r['units']:.4g} | {r['cpu']:.2f} | {per} |"
        )
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["pooch", "lns", "blocks", "auto", "exact"])
    parser.add_argument("--work", nargs="+", type=float, default=[0.25, 1.0, 4.0])
    parser.add_argument("--layers", type=int, default=300)
    parser.add_argument("--budget", default="40%")
    parser.add_argument("--load", type=int, default=2, help="busy processes in the loaded run")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument(
        "--calibrate", nargs="*", help="methods of the calibration table (default: every one)"
    )
    parser.add_argument("--no-calibration", action="store_true")
    parser.add_argument(
        "--calibration-from",
        type=Path,
        help="the calibration table from these saved rows (work_rates --json), no solves",
    )
    parser.add_argument(
        "--calibration-only",
        action="store_true",
        help="rewrite the calibration section of --output, keep the rest of it as it is",
    )
    args = parser.parse_args(argv)
    calibrated = (
        [] if args.no_calibration else calibration(args.calibrate or None, args.calibration_from)
    )
    if args.calibration_only:
        kept = args.output.read_text().split(PLAN_SECTION, 1)[1] if args.output.exists() else ""
        title = "# Work limits: what a unit costs, plan quality, and the same plan under load"
        text = "\n".join([title, "", *calibrated]) + ("\n" + PLAN_SECTION + kept if kept else "")
        args.output.write_text(text)
        print(f"wrote {args.output}")
        return 0

    profile = planopt.random_chain(args.layers, seed=7, family="mixed")
    rows = []
    for method in args.methods:
        if method not in registry.available():
            print(f"skip {method}: not available", file=sys.stderr)
            continue
        for work in args.work:
            quiet, quiet_s = timed(profile, args.budget, method, work)
            with busy_cores(args.load):
                loaded, loaded_s = timed(profile, args.budget, method, work)
            same = quiet.plan == loaded.plan and quiet.work_used == loaded.work_used
            overhead = "-" if quiet.schedule is None else f"{100 * quiet.schedule.overhead:.2f}%"
            rows.append(
                f"| {method} | {work:g} | {quiet.status} | {overhead} | {quiet.work_used:.3f} "
                f"| {quiet_s:.2f} | {loaded_s:.2f} | {'yes' if same else '**NO**'} |"
            )
            print(rows[-1], flush=True)
    header = [
        "# Work limits: what a unit costs, plan quality, and the same plan under load",
        "",
        *calibrated,
        PLAN_SECTION,
        "",
        f"Generated by `python -m experiments.bench_work` on {platform.node() or 'this machine'} "
        f"({os.cpu_count()} cores, Python {platform.python_version()}; 1-minute load average "
        f"{os.getloadavg()[0]:.1f} at the end). Net: "
        f"`random_chain({args.layers}, seed=7, family='mixed')` at {args.budget}, seed 0. "
        f"Each row solves twice with the same work limit and no time limit: on the machine "
        f"as it was, then with {args.load} processes spinning on the CPU.",
        "",
        "| method | work limit | status | overhead | work used | wall s (quiet) "
        "| wall s (loaded) | identical plan |",
        "|---|---|---|---|---|---|---|---|",
    ]
    args.output.write_text("\n".join(header + rows) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
