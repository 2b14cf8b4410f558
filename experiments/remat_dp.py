"""remat-dp against the MIP and Rotor: time to a proven recompute-only optimum against L.

Run from the repository root:

    python -m experiments.remat_dp                       # writes experiments/results/remat_dp.md
    python -m experiments.remat_dp --lengths 16 32 --mip-limit 10   # quick look

The chain is the one published planners are usually compared on: layer `i`
has forward `1 + i mod 3` ms, backward twice that, and one saved activation
(its output) of `64 + 16 (i mod 4)` MiB; budgets are fractions of keep-all
activation memory. Every solve runs in this one process, one after the
other, on the same chains:

* `remat-dp`: this package's DP, timed twice: the method as `planopt.solve`
  calls it (profile to proven plan: model, bound, search, certificate and
  `Plan`; like for like with Rotor's C call below), and `planopt.solve`
  itself (adds the request's checks, the joint space's minimum budget and
  the simulator's re-scoring, common to every method); CPU seconds of this
  process (the machine is shared: wall time would count other processes'
  turns, and a run longer than a scheduler slice waits out theirs),
  medians of `--repeats` runs up to 1,000 layers;
* `recompute-only`: this package's MIP (CP-SAT, 2 threads, `--mip-limit`
  seconds, up to `--mip-max` layers);
* Rotor: Beaumont et al.'s DP as Rockmate 2.0 ships it (its C solver, with
  Rockmate's default memory unit of 1 MiB), where Rockmate is installed
  (`pip install --no-deps rockmate`; see `experiments/peers.py`), while its
  table of `(slots + 1) (L + 1)^2` cells fits the solver's int index. Timed:
  the C call that fills the table and reads the optimum (`RkTable` and
  `get_opt`, CPU seconds, the same medians); not timed: building its chain from the
  profile in Python (microseconds) and its schedule (`get_sequence`);
* Checkmate's MILP is not run: Checkmate is not on PyPI.

A last table solves the bundled nets at the same budgets (`--no-bundled`
skips it), with the recompute-only space's own minimum budget.

The three model memory differently (Rotor in whole units with the input and
output always resident, and nested recomputation allowed), so compare times
to proof, not makespans; the makespan column is this package's optimum.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

import planopt
from planopt.budget import space_min_budget
from planopt.bundled import bundled_profile, bundled_profile_names
from planopt.problem import Problem
from planopt.profile import Device, Layer, Profile
from solvers.remat.chain import ChainModel
from solvers.remat.pychain import PyChain
from solvers.remat.short import SHORT_LAYERS
from solvers.remat_dp import remat_dp

from . import peers

RESULTS = Path(__file__).parent / "results"
LENGTHS = (16, 32, 64, 100, 200, 400, 1000, 2000, 5000, 10000)
FRACTIONS = (0.5, 0.3, 0.2)
MIB = 2**20


def synthetic_chain(n: int) -> Profile:
    """The comparison chain (see the module doc); a version-1 profile."""
    return Profile(
        f"chain{n}",
        Device("pcie", 1e10, 1e10, 0.0),
        0,
        tuple(
            Layer.v1(f"l{i}", (1 + i % 3) * 1e-3, 2 * (1 + i % 3) * 1e-3, (64 + 16 * (i % 4)) * MIB)
            for i in range(n)
        ),
    )


@dataclass(frozen=True)
class Timed:
    status: str
    seconds: float
    overhead: float | None = None
    note: str = ""
    method_seconds: float | None = None  # the method alone (remat-dp only)
    warm: float | None = None  # Rotor only: the median of the calls after the first ones


def time_dp(profile: Profile, budget: float, repeats: int, *, alone: bool = True) -> Timed:
    """`planopt.solve` and (`alone`) the method by itself, alternated, medians of `repeats`."""
    runs, method_runs = [], []
    sol = None
    problem = Problem(profile, budget, planopt.min_budget(profile))
    for _ in range(repeats):
        start = time.process_time()
        sol = planopt.solve(profile, budget, "remat-dp")
        runs.append(time.process_time() - start)
        if not alone or sol.message.startswith("budget must be at least"):  # no method ran
            continue
        start = time.process_time()
        remat_dp(problem)
        method_runs.append(time.process_time() - start)
    overhead = sol.schedule.overhead if sol.schedule is not None else None
    method = statistics.median(method_runs) if method_runs else None
    return Timed(sol.status.value, statistics.median(runs), overhead, sol.message, method)


def time_mip(profile: Profile, budget: float, limit: float) -> Timed:
    start = time.perf_counter()
    sol = planopt.solve(profile, budget, "recompute-only", time_limit=limit, threads=2)
    seconds = time.perf_counter() - start
    note = f"gap {sol.gap:.1%} to its bound" if sol.gap is not None else ""
    overhead = sol.schedule.overhead if sol.schedule is not None else None
    return Timed(sol.status.value, seconds, overhead, note)


def time_rotor(profile: Profile, budget: float, repeats: int, warm: int = 0) -> Timed:
    """Rotor's C call, median of its first `repeats` calls (as remat-dp's are timed), and
    of `warm` more: its first calls on a chain take up to 10x longer than later ones
    (16 layers at 50%: 0.3-0.9 ms, then 0.06 ms; measured, the cause not traced)."""
    activation = budget - profile.static_bytes
    runs = [peers.rotor(profile, activation, clock=time.process_time) for _ in range(repeats)]
    run = runs[-1]
    if math.isnan(run.seconds):
        return Timed("-", math.nan, None, run.note)
    seconds = statistics.median(r.seconds for r in runs)
    later = [peers.rotor(profile, activation, clock=time.process_time) for _ in range(warm)]
    warmed = statistics.median(r.seconds for r in later) if later else None
    return Timed("optimal" if run.proven else run.note, seconds, warm=warmed)


def _cell(t: Timed | None, limit: float | None = None) -> str:
    if t is None or math.isnan(t.seconds):
        return "–"
    warm = f" (then {_seconds(t.warm)})" if t.warm is not None else ""
    if t.status == "optimal":
        return f"proven, {_seconds(t.seconds)}{warm}"
    if t.status == "infeasible":
        return f"infeasible, {_seconds(t.seconds)}{warm}"
    extra = f" ({t.note})" if t.note else ""
    return f"not proven in {limit:g} s{extra}" if limit else f"{t.status}{extra}"


def _seconds(s: float) -> str:
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s"


def _ours(dp: Timed) -> float:
    """The method's own time where it ran (like for like with Rotor's C call)."""
    return dp.method_seconds if dp.method_seconds is not None else dp.seconds


def _summary(rows, floor: tuple[int, float] | None = None) -> str:
    """Where remat-dp proves 1,000 layers, from which L it beats Rotor at every budget,
    and every cell where Rotor is faster, by how much (CPU seconds, see the header)."""
    thousand = [dp.seconds for _, n, dp, _, _ in rows if n == 1000 and dp.status == "optimal"]
    faster_from = []
    behind = []  # (n, fraction, ratio ours / theirs) where Rotor is faster
    for fraction in sorted({r[0] for r in rows}):
        timed = [
            (n, _ours(dp), rotor.seconds)
            for frac, n, dp, _, rotor in rows
            if frac == fraction and rotor is not None and not math.isnan(rotor.seconds)
        ]
        slower = [n for n, ours, theirs in timed if ours >= theirs]
        faster = [n for n, ours, theirs in timed if ours < theirs and n > max(slower, default=0)]
        behind += [(n, fraction, ours / theirs) for n, ours, theirs in timed if ours >= theirs]
        if faster:
            faster_from.append((min(faster), f"{fraction:.0%}"))
    parts = []
    if thousand:
        low, high = _seconds(min(thousand)), _seconds(max(thousand))
        span = low if low == high else f"{low} to {high}"
        parts.append(f"remat-dp proves the 1,000-layer chain in {span}")
    if faster_from:
        if len({n for n, _ in faster_from}) == 1:
            where = f"from {faster_from[0][0]} layers on at every budget"
        else:
            where = "from " + ", ".join(f"{n} layers on at {f}" for n, f in faster_from)
        parts.append(f"the method is faster than Rotor's C DP {where}")
    if behind:
        cells = ", ".join(f"{n} layers at {f:.0%} ({r:.1f}x)" for n, f, r in sorted(behind))
        parts.append(f"Rotor's C is faster at {cells}")
    elif faster_from:
        parts.append("Rotor's C is faster nowhere in this table")
    warm = sorted(
        (n, frac, _ours(dp) / rotor.warm)
        for frac, n, dp, _, rotor in rows
        if rotor is not None and rotor.warm is not None and _ours(dp) >= rotor.warm
    )
    if any(r is not None and r.warm is not None for *_, r in rows):
        cells = ", ".join(f"{n} layers at {f:.0%} ({r:.1f}x)" for n, f, r in warm)
        parts.append(
            "Rotor's later calls (in brackets) are faster than the method "
            + (f"at {cells}" if warm else "nowhere")
        )
    text = ("; ".join(parts) + ".") if parts else ""
    if floor is not None:
        n, seconds = floor
        text += (
            f" The floor of this Python at {n} layers: reading the chain's numbers alone "
            f"(the per-layer lists, before any cost or search) takes {_seconds(seconds)}."
        )
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--fractions", type=float, nargs="+", default=list(FRACTIONS))
    parser.add_argument("--mip-limit", type=float, default=120.0)
    parser.add_argument("--mip-max", type=int, default=64)
    parser.add_argument("--rotor-max", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--rotor-warm", type=int, default=5, help="Rotor's later calls timed apart (median)"
    )
    parser.add_argument("--no-bundled", action="store_true", help="skip the bundled nets")
    parser.add_argument("--output", type=Path, default=RESULTS / "remat_dp.md")
    args = parser.parse_args(argv)
    rows = []
    for fraction in args.fractions:
        for n in args.lengths:
            profile = synthetic_chain(n)
            budget = planopt.budget_from_fraction(profile, fraction)
            repeats = args.repeats if n <= 1000 else 1
            dp = time_dp(profile, budget, repeats)
            mip = time_mip(profile, budget, args.mip_limit) if n <= args.mip_max else None
            rotor = (
                time_rotor(profile, budget, repeats, args.rotor_warm)
                if n <= args.rotor_max
                else None
            )
            rows.append((fraction, n, dp, mip, rotor))
            print(fraction, n, dp, mip, rotor, flush=True)
    nets = []
    for name in [] if args.no_bundled else bundled_profile_names():
        profile = bundled_profile(name)
        minimum = time_min_budget(profile)
        cells = [
            time_dp(profile, planopt.budget_from_fraction(profile, f), 1, alone=False)
            for f in args.fractions
        ]
        nets.append((name, len(profile.layers), minimum, cells))
        print(name, minimum, cells, flush=True)
    write(args, rows, nets, time_model(min(args.lengths)))


def time_model(n: int, repeats: int = 21) -> tuple[int, float]:
    """(n, median seconds to build the DP's model of the n-layer chain): the Python floor."""
    profile = synthetic_chain(n)
    runs = []
    model = PyChain if n <= SHORT_LAYERS else ChainModel  # what the method builds
    for _ in range(repeats):
        start = time.process_time()
        model(profile)
        runs.append(time.process_time() - start)
    return n, statistics.median(runs)


def time_min_budget(profile: Profile) -> tuple[float, float]:
    """(the recompute-only space's minimum budget as a fraction of keep-all, seconds)."""
    start = time.process_time()
    value = space_min_budget(profile, "recompute-only").value
    seconds = time.process_time() - start
    keep_all = planopt.keep_all_peak(profile)
    return (value - profile.static_bytes) / (keep_all - profile.static_bytes), seconds


def write(args, rows, nets=(), floor: tuple[int, float] | None = None) -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    lines = [
        "# remat-dp: time to a proven recompute-only optimum",
        "",
        f"Generated by `python -m experiments.remat_dp --mip-limit {args.mip_limit:g}` on "
        f"{platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} CPUs "
        f"(1-minute load average {load:.1f} at the end); every solve in one process, one "
        "after the other. Chain: layer `i` has forward `1 + i mod 3` ms, backward twice "
        "that, activation `64 + 16 (i mod 4)` MiB; budget = fraction of keep-all "
        "activation memory. Times are CPU seconds of this process (`time.process_time`: "
        "the machine is shared, and wall time counts the other processes' turns; the "
        "MIP's are wall seconds, it runs 2 threads), medians of "
        f"{args.repeats} runs up to 1,000 layers, one beyond. **remat-dp, the method**: "
        "`remat_dp(problem)` as `planopt.solve` calls it, from the profile to the proven "
        "plan (model, bound, search, certificate, `Plan`); like for like with Rotor's "
        "column, which times Rockmate's C call that fills its table and reads the optimum "
        "(`RkTable` and `get_opt`; building its chain in Python, microseconds, and its "
        "schedule are not timed). **planopt.solve** adds what every method gets: the "
        "request's checks, the joint space's minimum budget and the simulator's re-scoring. "
        f"MIP: `recompute-only` on CP-SAT, 2 threads, {args.mip_limit:g} s limit. Rotor: "
        f"Rockmate 2.0's C solver (1 MiB units), up to {args.rotor_max} layers (at 400 its "
        "table of (slots + 1)(L + 1)^2 cells holds 1.7-2.8 billion cells, 20-34 GB, past "
        "the solver's int index at 50%); in brackets, the median of "
        f"{args.rotor_warm} more calls after those: Rotor's first calls on a chain take "
        "longer (up to 10x at 16 layers; remat-dp's do not). Checkmate: not on "
        "PyPI, not run. The three model memory differently (Rotor: whole units, input and "
        "output resident, nested recomputation): compare times to proof, not makespans.",
        "",
    ]
    lines += [_summary(rows, floor), ""]
    for fraction in args.fractions:
        lines += [
            f"## Budget {fraction:.0%} of keep-all activations",
            "",
            "| L | remat-dp, the method | planopt.solve | its overhead | MIP `recompute-only` "
            "| Rotor's DP (Rockmate 2.0, C) |",
            "|---:|---|---|---:|---|---|",
        ]
        for frac, n, dp, mip, rotor in rows:
            if frac != fraction:
                continue
            overhead = f"{dp.overhead:.2%}" if dp.overhead is not None else "–"
            method = (
                _cell(replace(dp, seconds=dp.method_seconds))
                if dp.method_seconds is not None
                else "– (answered before any method)"
            )
            lines.append(
                f"| {n} | {method} | {_cell(dp)} | {overhead} | "
                f"{_cell(mip, args.mip_limit)} | {_cell(rotor)} |"
            )
        lines.append("")
    if nets:
        head = " | ".join(f"{f:.0%}" for f in args.fractions)
        lines += [
            "## The bundled nets (measured and roofline profiles, read as cost model v2)",
            "",
            "remat-dp's time to proof (one run each) and the overhead of its optimum; "
            "'infeasible' below the space's minimum budget, itself proven by the same "
            "segments (`space_min_budget(profile, 'recompute-only')`, its time in brackets; "
            "below the joint space's minimum `planopt.solve` answers before any method runs, "
            "in well under a millisecond).",
            "",
            f"| net | L | recompute-only min budget | {head} |",
            "|---|---:|---|" + "---|" * len(args.fractions),
        ]
        for name, n, (minimum, seconds), cells in nets:
            parts = [
                f"{_cell(c)}, {c.overhead:.1%}" if c.overhead is not None else _cell(c)
                for c in cells
            ]
            lines.append(
                f"| {name} | {n} | {minimum:.1%} ({_seconds(seconds)}) | "
                + " | ".join(parts)
                + " |"
            )
        lines.append("")
    args.output.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
