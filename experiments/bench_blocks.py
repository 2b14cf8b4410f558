"""Deep nets: the block planner, auto and the baselines against the lower bound.

Run from the repository root (about an hour with the defaults):

    python -m experiments.bench_blocks                  # writes experiments/results/bench_blocks.md
    python -m experiments.bench_blocks --gpt 12 48 --no-random --no-small   # quick look

Three parts:

1. GPT-style decoders (`planopt.zoo.gpt`, H100 roofline; 12/24/48 blocks are
   the bundled profiles, 96 is generated here) at budgets of 70/50/30% of
   keep-all activation memory: solve time and overhead of `blocks` and `auto`
   (time limit `--time-limit`, default 5 s, greedy included), the published
   greedy, `sqrt-n` and `all-swap`, and the lower bound (the better of
   `planopt.lower_bound` as an LP and as a MIP cut at `--bound-limit`). For
   12 blocks the exact planner also runs with `--exact-limit` seconds.
2. Random non-repeating chains (`random_chain(L, family="uniform")`, which
   has no signatures and no repeats): `auto` (time limit `--random-limit`)
   against the greedy and the lower bound.
3. What the decomposition costs: nets of k copies of a 2-layer block (plus
   one layer before and after) small enough for CP-SAT to prove the optimum;
   `blocks` with and without its exact windows against that optimum.

Every figure is the simulator's (`planopt.solve` re-scores each plan); the
time is the wall time of `planopt.solve`. The machine is shared, so times
are upper bounds; the load average is printed in the header.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import planopt
from planopt import Status, random_chain, repeated_chain

RESULTS = Path(__file__).parent / "results"
FRACTIONS = (0.7, 0.5, 0.3)
BASELINES = ("greedy", "sqrt-n", "all-swap")


def gpt_profile(blocks: int) -> planopt.Profile:
    """The bundled GPT profile with `blocks` blocks, or the same model built here."""
    name = f"gpt-{blocks}blk-b8-s1024-h100-pcie5-roofline"
    if name in planopt.bundled_profile_names():
        return planopt.bundled_profile(name)
    from planopt.zoo import H100_PCIE5, gpt, to_profile

    return to_profile(gpt(blocks, 8, 1024), H100_PCIE5, name=name)


@dataclass(frozen=True)
class Run:
    status: str
    seconds: float
    makespan: float | None
    bound: float | None = None
    message: str = ""


def run(profile, budget, method: str, **options) -> Run:
    start = time.monotonic()
    sol = planopt.solve(profile, budget, method, **options)
    seconds = time.monotonic() - start
    ok = sol.status in (Status.OPTIMAL, Status.FEASIBLE) and sol.schedule.feasible
    return Run(
        sol.status.value, seconds, sol.makespan if ok else None, sol.lower_bound, sol.message
    )


def bound(profile, budget, limit: float) -> float | None:
    """The better of the LP and the (time-limited) MIP relaxation bounds."""
    lp = planopt.lower_bound(profile, budget, relax=True)
    mip = planopt.lower_bound(profile, budget, time_limit=limit)
    found = [b for b in (lp, mip) if b is not None]
    return max(found) if found else None


def pct(makespan: float | None, t_ideal: float) -> str:
    return "no plan" if makespan is None else f"{100 * (makespan / t_ideal - 1):.2f}%"


def cell(r: Run, t_ideal: float) -> str:
    return f"{pct(r.makespan, t_ideal)} ({r.seconds:.2f} s)"


# -- part 1: GPT decoders ------------------------------------------------------------------


def gpt_part(args) -> list[str]:
    lines = [
        "| blocks | L | budget | blocks | auto | greedy | sqrt-n | all-swap | lower bound "
        "| blocks / bound - 1 | blocks improved by |",
        "|---:|---:|---:|---|---|---|---|---|---|---:|---|",
    ]
    exact_lines = [
        "| budget | exact status | exact overhead | exact bound | solve s | blocks overhead "
        "| blocks / exact - 1 |",
        "|---:|---|---|---|---:|---|---:|",
    ]
    for blocks in args.gpt:
        profile = gpt_profile(blocks)
        t_ideal = profile.t_ideal
        for fraction in FRACTIONS:
            budget = planopt.budget_from_fraction(profile, fraction)
            if budget < planopt.min_budget(profile):
                lines.append(
                    f"| {blocks} | {len(profile)} | {fraction:.0%} | below the minimum budget "
                    f"({planopt.min_budget(profile) / 2**30:.1f} GiB) | | | | | | | |"
                )
                continue
            ours = run(profile, budget, "blocks", time_limit=args.time_limit)
            auto = run(profile, budget, "auto", time_limit=args.time_limit)
            base = {m: run(profile, budget, m) for m in BASELINES}
            low = bound(profile, budget, args.bound_limit)
            gap = (
                "-"
                if low is None or ours.makespan is None
                else f"{100 * (ours.makespan / low - 1):.2f}%"
            )
            moves = ours.message.split("improving moves: ")[-1] if ours.message else ""
            lines.append(
                f"| {blocks} | {len(profile)} | {fraction:.0%} | {cell(ours, t_ideal)} | "
                f"{cell(auto, t_ideal)} | "
                + " | ".join(cell(base[m], t_ideal) for m in BASELINES)
                + f" | {pct(low, t_ideal)} | {gap} | {moves} |"
            )
            print(lines[-1], flush=True)
            if blocks == 12 and args.exact_limit > 0:
                ex = run(profile, budget, "exact", time_limit=args.exact_limit, threads=2)
                vs = (
                    "-"
                    if ex.makespan is None or ours.makespan is None
                    else f"{100 * (ours.makespan / ex.makespan - 1):+.2f}%"
                )
                exact_lines.append(
                    f"| {fraction:.0%} | {ex.status} | {pct(ex.makespan, t_ideal)} | "
                    f"{pct(ex.bound, t_ideal) if ex.bound else '-'} | {ex.seconds:.0f} | "
                    f"{pct(ours.makespan, t_ideal)} | {vs} |"
                )
                print(exact_lines[-1], flush=True)
    out = [
        "## GPT-style decoders",
        "",
        f"Overhead `T / T_ideal - 1` and solve time. `blocks` and `auto` ran with a "
        f"{args.time_limit:g} s time limit (the greedy they start from included); the lower "
        f"bound is the better of the LP relaxation and the MIP relaxation cut at "
        f"{args.bound_limit:g} s. 'improved by': the phases of `blocks` that improved "
        "the plan (times each).",
        "",
        *lines,
        "",
    ]
    if len(exact_lines) > 2:
        out += [
            f"### 12 blocks: the exact planner with {args.exact_limit:g} s",
            "",
            "CP-SAT (2 threads) on the whole 160-layer model, warm-started with the greedy.",
            "",
            *exact_lines,
            "",
        ]
    return out


# -- part 2: random chains -------------------------------------------------------------------


def random_part(args) -> list[str]:
    lines = [
        "| L | seed | budget | auto | greedy | lower bound | auto / greedy - 1 "
        "| auto / bound - 1 |",
        "|---:|---:|---:|---|---|---|---:|---:|",
    ]
    for n in args.random:
        for seed in range(args.seeds):
            profile = random_chain(n, seed=seed, family="uniform", version=args.chain_version)
            t_ideal = profile.t_ideal
            for fraction in (0.5, 0.3):
                budget = planopt.budget_from_fraction(profile, fraction)
                if budget < planopt.min_budget(profile):
                    continue
                auto = run(profile, budget, "auto", time_limit=args.random_limit)
                greedy = run(profile, budget, "greedy")
                low = bound(profile, budget, args.bound_limit)
                vs_g = f"{100 * (auto.makespan / greedy.makespan - 1):+.2f}%"
                vs_b = "-" if low is None else f"{100 * (auto.makespan / low - 1):.2f}%"
                lines.append(
                    f"| {n} | {seed} | {fraction:.0%} | {cell(auto, t_ideal)} | "
                    f"{cell(greedy, t_ideal)} | {pct(low, t_ideal)} | {vs_g} | {vs_b} |"
                )
                print(lines[-1], flush=True)
    return [
        "## Random non-repeating chains",
        "",
        f"`random_chain(L, seed, family='uniform', version={args.chain_version})` "
        "(no signatures, no repeats: `auto` "
        f"uses `lns`), `auto` with a {args.random_limit:g} s limit.",
        "",
        *lines,
        "",
    ]


# -- part 3: the decomposition against the exact optimum ------------------------------------


def copies_net(seed: int, k: int, version: int) -> planopt.Profile:
    base = random_chain(4, seed=seed, family="uniform", version=version)
    layers = base.layers
    return base.replace_layers(repeated_chain(layers[1:3], k, layers[:1], layers[3:]))


def small_part(args) -> list[str]:
    rows: dict[int, list[tuple[float, float, float, float, float]]] = {}
    unproven = 0
    for k in range(2, 7):
        for seed in range(args.small_seeds):
            profile = copies_net(seed, k, args.chain_version)
            for fraction in FRACTIONS:
                budget = planopt.budget_from_fraction(profile, fraction)
                if budget < planopt.min_budget(profile):
                    continue
                ex = run(profile, budget, "exact", time_limit=args.small_exact_limit)
                if ex.status != "optimal":
                    unproven += 1
                    continue
                full = run(profile, budget, "blocks", time_limit=30)
                bare = run(profile, budget, "blocks", time_limit=30, window=0)
                greedy = run(profile, budget, "greedy")
                rows.setdefault(k, []).append(
                    (
                        full.makespan / ex.makespan - 1,
                        bare.makespan / ex.makespan - 1,
                        greedy.makespan / ex.makespan - 1,
                        full.seconds,
                        full.bound / ex.makespan - 1,
                    )
                )
                print(k, seed, fraction, rows[k][-1], flush=True)
    lines = [
        "| k | L | instances | blocks: median / max gap | within 1% | blocks without "
        "windows: median / max | greedy: median / max | blocks median s | bound <= optimum |",
        "|---:|---:|---:|---|---:|---|---|---:|---:|",
    ]

    def mm(got: list, col: int) -> str:
        vals = [100 * g[col] for g in got]
        return f"{statistics.median(vals):.2f} / {max(vals):.2f}%"

    for k, got in sorted(rows.items()):
        within = sum(1 for g in got if g[0] <= 0.01)
        below = sum(1 for g in got if g[4] <= 1e-9)
        lines.append(
            f"| {k} | {2 * k + 2} | {len(got)} | {mm(got, 0)} | {within}/{len(got)} | "
            f"{mm(got, 1)} | {mm(got, 2)} | {statistics.median(g[3] for g in got):.2f} | "
            f"{below}/{len(got)} |"
        )
    return [
        "## What the decomposition costs against the exact optimum",
        "",
        f"Nets of one random layer, k copies of a random 2-layer block and one random layer "
        f"(`random_chain(4, seed, family='uniform', version={args.chain_version})`, "
        f"seeds 0-{args.small_seeds - 1}), "
        f"budgets 70/50/30%; instances where CP-SAT proved the optimum within "
        f"{args.small_exact_limit:g} s ({unproven} others left out). Gap = T / T_opt - 1. "
        "'without windows': `blocks` with `window=0` (the group search alone: block "
        "options, copy classes, pairs, kicks).",
        "",
        *lines,
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpt", type=int, nargs="*", default=[12, 24, 48, 96])
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--bound-limit", type=float, default=30.0)
    parser.add_argument("--exact-limit", type=float, default=600.0)
    parser.add_argument("--random", type=int, nargs="*", default=[200, 500, 1000])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--random-limit", type=float, default=10.0)
    parser.add_argument("--small-seeds", type=int, default=5)
    parser.add_argument("--small-exact-limit", type=float, default=60.0)
    parser.add_argument(
        "--chain-version", type=int, choices=(1, 2), default=2, help="random chains' profile format"
    )
    parser.add_argument("--no-random", action="store_true")
    parser.add_argument("--no-small", action="store_true")
    parser.add_argument("--output", type=Path, default=RESULTS / "bench_blocks.md")
    args = parser.parse_args(argv)

    before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    began = time.monotonic()
    parts = gpt_part(args)
    if not args.no_random:
        parts += random_part(args)
    if not args.no_small:
        parts += small_part(args)
    after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m experiments.bench_blocks", *given])
    text = "\n".join(
        [
            "# Deep nets: block decomposition, auto and the baselines",
            "",
            f"Generated by `{command}` on {platform.machine()}, Python "
            f"{platform.python_version()}, {os.cpu_count()} CPUs (shared; 1-minute load "
            f"average {before:.1f} before and {after:.1f} after; {time.monotonic() - began:.0f} s "
            "in all). Cost model: the GPT decoders are the zoo's `planopt.profile/2`; the "
            f"random chains are `/{args.chain_version}`.",
            "",
            *parts,
        ]
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
