"""Does every method stop within its time limit at any size? Limit against wall time.

Run from the repository root (under `nice`: it keeps the cores busy for minutes):

    python -m experiments.bench_limits            # writes experiments/results/time_limits.md
    python -m experiments.bench_limits --sizes 1000 --methods greedy --output /tmp/t.md

Each row is one `planopt.solve` of a seeded random chain (`random_chain(L,
seed=0)`, family mixed; static 2% of the activations at 10^6 layers) at a
50% budget with `--time-limit` seconds (5 by default; `max_layers=L` where
a method has that option). The wall time is
measured around the whole call, setup included (minimum budget, problem
building, the method's own preparation, the final re-simulation): that is
what a user waits for. The promise checked: wall <= limit * 1.1 + 1 s. The
greedy also runs at 10^6 layers and, at every size, with plentiful memory
(a budget of 10x keep-all), where it must return keep-all at once. Sizes
above `--max-size` are skipped for every method but the greedy; at 10^6
layers the limit is `--big-limit` (30 s, as in issue 16's report), since
reading a "50%" budget alone simulates keep-all, seconds at that size.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import planopt
from planopt import registry
from planopt.errors import PlanoptError
from planopt.random_chain import random_chain

METHODS = (
    "greedy",
    "exact",
    "lns",
    "blocks",
    "auto",
    "recompute-only",
    "swap-only",
    "lower-bound",
)
DEFAULT_SIZES = (1_000, 10_000, 100_000, 1_000_000)
BIG_ONLY = ("greedy",)  # methods measured at the largest size
DEFAULT_OUTPUT = Path(__file__).parent / "results" / "time_limits.md"


@dataclass(frozen=True)
class Row:
    method: str
    layers: int
    budget: str
    limit: float
    wall: float
    cpu: float
    load: float
    status: str
    note: str

    @property
    def allowed(self) -> float:
        return self.limit * 1.1 + 1.0

    @property
    def within(self) -> bool:
        return self.wall <= self.allowed


def measure(method: str, profile: planopt.Profile, budget: str, limit: float) -> Row:
    n = len(profile.layers)
    # The exact methods refuse long nets unless asked: ask, so the limit is what stops them.
    options = {"max_layers": n} if "max_layers" in registry.get(method).options() else {}
    started, cpu = time.monotonic(), time.process_time()
    try:
        solution = planopt.solve(profile, budget, method, time_limit=limit, **options)
    except PlanoptError as exc:
        wall, cpu = time.monotonic() - started, time.process_time() - cpu
        load = os.getloadavg()[0]
        return Row(method, n, budget, limit, wall, cpu, load, "error", str(exc)[:80])
    wall, cpu = time.monotonic() - started, time.process_time() - cpu
    note = ""
    if solution.plan is not None:
        counts = {a.value: 0 for a in planopt.Action}
        for action in solution.plan.actions:
            counts[action.value] += 1
        note = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    load = os.getloadavg()[0]
    return Row(method, n, budget, limit, wall, cpu, load, solution.status.value, note)


FINDINGS = (
    "## What ran past the limit, and why (issue 16)",
    "",
    "Measured with this script on the same shared 2-core machine (load 13-17) before "
    "each fix, 5 s limit: lower-bound 22.7 s at 10^3 layers (HiGHS's solution vector "
    "re-read for every variable: quadratic); blocks 9.1 s, auto 12.2 s, swap-only 11.4 s "
    "at 10^4; at 10^5 greedy 9.9 s, exact 22.6 s, lns 15.9 s, blocks 29.5 s, auto 15.7 s, "
    "swap-only 14.6 s, recompute-only 7.9 s. The time went where no deadline was looked "
    "at: `solve()` started its clock after the minimum budget (whose witness plan was "
    "simulated for nothing: 2.4 s at 10^5); the recompute-only seed's completion bound "
    "(seconds of table building); `find_blocks` (all of it), every finer block level "
    "built before the search; every starter run and every start scored after the "
    "deadline; the relaxation's model building (quadratic prefix sums, then PuLP); and "
    "after the method, building the plan (validation that formatted a message per "
    "layer: 1-2 s at 10^5) and re-simulating it on a fresh scorer. Each now looks at "
    "the deadline or is gone, and the method's deadline keeps back the time the final "
    "re-scoring takes (at most half the limit).",
    "",
    "Then the greedy at 10^6 layers, 50%: 61 s of wall time (21 s of CPU) on its 30 s "
    "limit under a load of 17. Its CPU, measured on a quiet machine (process time, "
    "cProfile for the detail): reading the `50%` budget 2.8 s (a scorer built, keep-all "
    "simulated), the minimum budget 0.5 s, the problem's scorer 0.9 s; in the greedy, the "
    "keep-all check 1.4 s, all-swap 3.7 s, stage 1's exposed-copy timing 2.0 s, about "
    "3.6 s of its own passes over the chain (the exposed scan, a million keep changes "
    "applied), then 1.8-2.1 s per bisection probe (stages 2 and 3 are never reached at "
    "this size); building the plan 3.0 s (2.4 s of it the profile's fingerprint, hashed "
    "on first use), re-checking and re-simulating it 3.7 s: 28 s in all. The deadline "
    "was looked at only between simulations, and the fingerprint fell after it. Now "
    "every simulation the greedy runs asks the deadline every 4,096 layers "
    "(`planopt.simulate.STOP_EVERY`, a few ms) and once before its memory sweep, as do "
    "stage 2's batched probe and the greedy's own passes; a check cut short undoes its "
    "change, so the greedy returns its last plan that fitted, or `timeout` when none had "
    "fitted yet. The clock alone cuts a simulation: a work limit charges each "
    "simulation before it runs, so a work-limited run takes the same steps on any "
    "machine. The fingerprint is hashed before the method starts, and the time kept "
    "back for the final re-scoring is 1e-5 s a layer (measured 3-4e-6 s of CPU now: "
    "room for a 2.5x slower machine): with the 2e-5 s of before, 15 s of the 30 s "
    "limit, the first run of this table (load 3.5) ended the 10^6 greedy with `timeout` "
    "and no plan, since reading the budget, the fingerprint and the first two "
    "simulations (keep-all, all-swap) had not ended by then. The simulator's backward "
    "pass also got faster (`reads_back` inlined, no sort of one-element lists): 10-13% "
    "a simulation at 10^5 layers; the greedy under a work limit takes the same steps to "
    "the same plan in the same time (-4% to +3% over four runs). Recompute-only at "
    "10^3 layers ran 22.9 s at load 2.4 (4.6 s at load 4, where it never got "
    "so far): the exact method's warm-start hint, a sweep of "
    "its model to a fixed point, did not look at the deadline; it now does before each "
    "sweep.",
    "",
    "What is left: at 10^6 layers about 7 s of CPU comes before any method starts "
    "(reading a `50%` budget simulates keep-all; the minimum budget; the fingerprint; "
    "the scorer) and about 4 s after it stops (building the plan, re-simulating it); "
    "inside a simulation the memory sweep (1.4 s for all-swap at 10^6 layers, one numpy "
    "sort) is not cut. Where the cores are shared each CPU second costs more wall time, "
    "and the promise holds only while the load leaves the time kept back enough. The "
    "`CPU` column is the figure a machine of its own would see. The run committed with "
    "this text had a 1-minute load of 2.4-2.9 on the 2 cores (other helpers' benchmarks "
    "among it) and every row within its promise.",
    "",
)


def table(rows: list[Row]) -> list[str]:
    out = [
        "| method | L | budget | limit | wall | allowed | within | CPU | load | status | plan |",
        "|---|---:|---:|---:|---:|---:|:---:|---:|---:|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.method} | {r.layers:,} | {r.budget} | {r.limit:g} s | {r.wall:.2f} s | "
            f"{r.allowed:.1f} s | {'yes' if r.within else '**no**'} | {r.cpu:.2f} s | "
            f"{r.load:.1f} | {r.status} | {r.note} |"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument(
        "--big-limit",
        type=float,
        default=30.0,
        help="the limit at 10^6 layers and more (reading the budget alone, one simulation "
        "of keep-all, takes seconds there)",
    )
    parser.add_argument(
        "--max-size", type=int, default=100_000, help="largest L for methods but the greedy"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)

    load_before = os.getloadavg()[0]
    rows: list[Row] = []
    for n in args.sizes:
        built = time.monotonic()
        # static bytes within planopt.limits' 2^40 at 10^6 layers (a quarter of 40 TB is not)
        profile = random_chain(n, seed=0, static_fraction=0.25 if n <= 100_000 else 0.02)
        built = time.monotonic() - built
        print(f"L={n}: profile built in {built:.1f} s", file=sys.stderr)
        for method in args.methods:
            if n > args.max_size and method not in BIG_ONLY:
                continue
            budgets = ["50%", "100%"] if method in BIG_ONLY else ["50%"]
            for budget in budgets:
                limit = args.big_limit if n >= 1_000_000 else args.time_limit
                row = measure(method, profile, budget, limit)
                print(table([row])[-1], file=sys.stderr)
                rows.append(row)
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m experiments.bench_limits", *given])
    text = [
        "# Time limits: does every method stop in time?",
        "",
        f"Generated by `{command}` on {platform.machine()}, Python "
        f"{sys.version.split()[0]}; {os.cpu_count()} CPUs, 1-minute load average "
        f"{load_before:.1f} before and {os.getloadavg()[0]:.1f} after the run (a load above "
        "the CPU count means other processes shared the machine).",
        "",
        "One `planopt.solve` per row on `random_chain(L, seed=0)` (family mixed) with "
        "`time_limit=limit` (and `max_layers=L` for the methods that refuse long nets by "
        "default, so that the limit is what stops them); wall is measured around the whole "
        "call (setup and the final re-simulation included). The promise: wall <= "
        "limit x 1.1 + 1 s (`allowed`). "
        "`100%` is keep-all's own peak (a percentage above it is refused): the greedy must "
        "return keep-all at once. `plan` counts the returned plan's actions. `CPU` is this "
        "process's CPU time in the call (a back-end's forked child, CP-SAT's, not counted) "
        "and `load` the 1-minute load average after it: on a shared machine wall time is "
        "CPU time stretched by the processes it shares the cores with.",
        "",
        *table(rows),
        "",
        *FINDINGS,
    ]
    args.output.write_text("\n".join(text), encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)
    late = [r for r in rows if not r.within]
    return 1 if late else 0


if __name__ == "__main__":
    raise SystemExit(main())
