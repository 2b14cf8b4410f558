"""The exact method's stages, each switched against the defaults, and a plain single CP-SAT call.

Run from the repository root (about 20 minutes with the defaults):

    python -m experiments.bench_ablation            # writes experiments/results/exact_ablation.md
    python -m experiments.bench_ablation --lengths 12 --seeds 1 --time-limit 10   # quick look

Instances: the chains `planopt.random_chain(L, seed, family="mixed", version=2)`,
seeds 0 .. `--seeds`-1, each at the budget `min_budget + r * (keep_all_peak -
min_budget)`, r = `--headroom` (default 0.3): 30% of the way from the least
memory any plan needs to keep-all's peak. (30% of keep-all's activation
memory, the version-1 benchmark's budget, is below the minimum of every
12- and 16-layer `/2` mixed chain of seeds 0-99: under v2 a plan must also
hold the gradients, so no plan fits.) With `--fraction r` the budget is
`budget_from_fraction(profile, r)` instead and chains that cannot meet it are
skipped.

Every solve gets a work limit (`--work-limit` units, `planopt.work`; 1 unit is
about 1 s of one core on the reference machine) and a wall-clock guard. Under
a work limit CP-SAT runs one worker and every solve is deterministic: the same
outcome on a loaded machine as on a quiet one (this machine's 2 cores were
shared by several jobs, where 2 racing threads measure the load, not the
method). The table quotes work units to proof (for `exact` everything it
spends: starts, bound, model, probe, polish and search; for `plain` the model
and the one call), and wall seconds beside them. Variants, each one switch
against the defaults (module constants, restored after each solve):

- `exact`: the defaults;
- `no probe`: `exact_search.PROBE_WORK = 0` (no call capped at the relaxation's bound);
- `polish off` / `polish on`: `exact.POLISH_FROM_LAYERS` past every L / 1 (every L);
- `one call` / `slices`: `exact_search.RESTART_MAX_SLICES` 1 (one back-end call on all
  the time left) / 12 (work slices that double, each with the next seed);
- `no hint`: the warm start is not handed to CP-SAT;
- `no stream row`: the model without its one implied row (the compute stream runs
  every forward, backward and recomputation);
- `plain`: the same plan model (`solvers.model.build`) in one CP-SAT call, nothing
  else: no starting plans, relaxation bound, floor, probe, polish, hint or slices.

The model has no symmetry-breaking rows to switch; the relaxation's rows as
cuts (`build(redundant=True)`) are defined for version-1 profiles only.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import planopt
from planopt import Status
from planopt.work import WorkMeter
from solvers import backends, exact, exact_search
from solvers.model.build import build

build_module = importlib.import_module("solvers.model.build")

RESULTS = Path(__file__).parent / "results"


@contextmanager
def _patched(module, **values) -> Iterator[None]:
    old = {k: getattr(module, k) for k in values}
    try:
        for k, v in values.items():
            setattr(module, k, v)
        yield
    finally:
        for k, v in old.items():
            setattr(module, k, v)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


VARIANTS: dict[str, Callable[[], object]] = {
    "exact": _nothing,
    "no probe": lambda: _patched(exact_search, PROBE_WORK=0.0),
    "polish off": lambda: _patched(exact, POLISH_FROM_LAYERS=10**9),
    "polish on": lambda: _patched(exact, POLISH_FROM_LAYERS=1),
    "one call": lambda: _patched(exact_search, RESTART_MAX_SLICES=1),
    "slices": lambda: _patched(exact_search, RESTART_MAX_SLICES=12),
    "no hint": lambda: _patched(
        exact,
        search=lambda problem, form, record, used, hint: exact_search.search(
            problem, form, record, used, None
        ),
        probe_relaxation_bound=lambda problem, form, record, used, hint, relaxed: (
            exact_search.probe_relaxation_bound(problem, form, record, used, None, relaxed)
        ),
    ),
    "no stream row": lambda: _patched(build_module, add_compute_stream_row=lambda *a: None),
}


@dataclass(frozen=True)
class Outcome:
    proven: bool
    seconds: float
    work: float
    makespan: float | None


def same_as_defaults(variant: str, n: int) -> bool:
    """Whether `variant` changes nothing at `n` layers (its outcome is the defaults')."""
    if variant == "polish off":
        return n < exact.POLISH_FROM_LAYERS
    if variant == "polish on":
        return n >= exact.POLISH_FROM_LAYERS
    if variant == "one call":
        return exact_search.RESTART_MAX_SLICES == 1
    if variant == "slices":
        return exact_search.RESTART_MAX_SLICES == 12
    return False


def run_exact(
    variant: str, profile: planopt.Profile, budget: float, work: float, guard: float
) -> Outcome:
    with VARIANTS[variant]():
        start = time.monotonic()
        sol = planopt.solve(profile, budget, "exact", work_limit=work, time_limit=guard, threads=2)
        seconds = time.monotonic() - start
    return Outcome(sol.status is Status.OPTIMAL, seconds, sol.work_used, sol.makespan)


def run_plain(profile: planopt.Profile, budget: float, work: float, guard: float) -> Outcome:
    """The plan model in one CP-SAT call (the whole work limit), nothing else; building
    and translating the model are charged as `exact` charges them."""
    start = time.monotonic()
    form = build(profile, budget)
    record = backends.get("cpsat")
    meter = WorkMeter()
    items = len(form.model.vars) + len(form.model.constraints)
    meter.charge((exact_search.BUILD_UNITS_PER_ITEM + record.translate_units) * items)
    result = record.load()(
        form,
        time_limit=guard,
        work_limit=max(0.01, work - meter.used),
        threads=1,
        seed=0,
        hint=None,
        relative_gap=exact_search.OPTIMALITY_GAP,
        meter=meter,
    )
    seconds = time.monotonic() - start
    makespan = None
    if result.values is not None:
        plan = form.decode(lambda v: result.values[v])
        schedule = planopt.simulate(profile, plan)
        if schedule.peak_bytes <= budget:
            makespan = schedule.makespan
    proven = result.status is backends.Status.OPTIMAL and makespan is not None
    return Outcome(proven, seconds, meter.used, makespan)


def instances(lengths: list[int], seeds: int, headroom: float, fraction: float | None):
    """Per length, seeds 0 .. seeds-1 at `headroom` of the range from the minimum budget
    to keep-all's peak, or (with `fraction`) at that share of keep-all's activation
    memory, the chains that cannot meet it skipped."""
    for n in lengths:
        for seed in range(seeds):
            profile = planopt.random_chain(n, seed=seed, family="mixed", version=2)
            least = planopt.min_budget(profile)
            if fraction is None:
                budget = math.floor(least + headroom * (planopt.keep_all_peak(profile) - least))
            else:
                budget = planopt.budget_from_fraction(profile, fraction)
            if budget >= least:
                yield n, seed, profile, budget


def _median_to_proof(outcomes: list[Outcome], of: Callable[[Outcome], float]) -> str:
    """Median work (or seconds) to proof, an unproven solve counting as more than any."""
    values = sorted(of(o) if o.proven else math.inf for o in outcomes)
    mid = statistics.median(values) if values else math.inf
    return f"{mid:.1f}" if math.isfinite(mid) else "> limit"


def table(rows: dict[tuple[int, int, str], Outcome], lengths: list[int], names: list[str]):
    lines = [
        "| variant | "
        + " | ".join(f"L = {n}: proven, median units (s) to proof" for n in lengths)
        + " |",
        "|---|" + "---:|" * len(lengths),
    ]
    for name in names:
        cells = []
        for n in lengths:
            group = [o for (m, _, v), o in rows.items() if m == n and v == name]
            proven = sum(o.proven for o in group)
            units = _median_to_proof(group, lambda o: o.work)
            seconds = _median_to_proof(group, lambda o: o.seconds)
            same = all(same_as_defaults(name, n) for _ in group[:1])
            cells.append(
                f"{proven}/{len(group)}, {units} ({seconds})" + (" = defaults" if same else "")
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def per_instance(rows: dict[tuple[int, int, str], Outcome], names: list[str]) -> list[str]:
    keys = sorted({(n, s) for n, s, _ in rows})
    lines = [
        "| L | seed | " + " | ".join(names) + " | same makespan |",
        "|---:|---:|" + "---:|" * len(names) + "---|",
    ]
    for n, s in keys:
        cells = []
        spans = []
        for name in names:
            o = rows.get((n, s, name))
            if o is None:
                cells.append("-")
                continue
            cells.append(f"{o.work:.1f}" + ("" if o.proven else " (not proven)"))
            if o.makespan is not None:
                spans.append(o.makespan)
        same = "yes" if spans and max(spans) <= min(spans) * (1 + 1e-6) else "no"
        lines.append(f"| {n} | {s} | " + " | ".join(cells) + f" | {same} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[12, 16])
    parser.add_argument("--seeds", type=int, default=2, help="chains per length")
    parser.add_argument("--headroom", type=float, default=0.3)
    parser.add_argument("--fraction", type=float, default=None)
    parser.add_argument("--work-limit", type=float, default=10.0)
    parser.add_argument("--time-guard", type=float, default=3000.0, help="seconds per solve")
    parser.add_argument("--variants", nargs="+", default=[*VARIANTS, "plain"])
    parser.add_argument("--output", type=Path, default=RESULTS / "exact_ablation.md")
    parser.add_argument(
        "--outcomes",
        type=Path,
        default=None,
        help="a JSON-lines file of outcomes: read first (those solves are not repeated), "
        "appended to after each solve, and the table written from all of it, so several "
        "processes (say one per length) can share one table",
    )
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--note", default="", help="a paragraph added under the header")
    parser.add_argument(
        "--defaults",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="set RESTART_MAX_SLICES, POLISH_FROM_LAYERS or PROBE_WORK for this run (the "
        "defaults the outcomes file was measured with, to redraw its table)",
    )
    args = parser.parse_args(argv)
    for item in args.defaults:
        name, value = item.split("=")
        module = exact if name == "POLISH_FROM_LAYERS" else exact_search
        if not hasattr(module, name):
            parser.error(f"--defaults: unknown constant {name!r}")
        setattr(module, name, type(getattr(module, name))(float(value)))

    rows = _read_outcomes(args.outcomes, args.work_limit)
    chosen = instances(args.lengths, args.seeds, args.headroom, args.fraction)
    for n, seed, profile, budget in chosen:
        if seed < args.first_seed:
            continue
        for name in args.variants:
            rows.update(_read_outcomes(args.outcomes, args.work_limit))
            if (n, seed, name) in rows:
                continue
            if name == "plain":
                outcome = run_plain(profile, budget, args.work_limit, args.time_guard)
            elif name != "exact" and same_as_defaults(name, n) and (n, seed, "exact") in rows:
                outcome = rows[(n, seed, "exact")]
            else:
                outcome = run_exact(name, profile, budget, args.work_limit, args.time_guard)
            rows[(n, seed, name)] = outcome
            _append_outcome(args.outcomes, args.work_limit, n, seed, name, outcome)
            state = "proven" if outcome.proven else "not proven"
            print(f"L={n} seed={seed} {name}: {state} {outcome.seconds:.1f}s", flush=True)
    if args.outcomes is not None:
        rows.update(_read_outcomes(args.outcomes, args.work_limit))
        args.lengths = sorted({n for n, _, _ in rows})
        args.seeds = max(s for _, s, _ in rows) + 1
    _write(args, rows)
    return 0


def _read_outcomes(path: Path | None, work: float) -> dict[tuple[int, int, str], Outcome]:
    if path is None or not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["work_limit"] == work:
            out[(r["n"], r["seed"], r["variant"])] = Outcome(
                r["proven"], r["seconds"], r["work"], r["makespan"]
            )
    return out


def _append_outcome(path: Path | None, work: float, n: int, seed: int, name: str, o: Outcome):
    if path is None:
        return
    record = {"work_limit": work, "n": n, "seed": seed, "variant": name, **o.__dict__}
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


def _write(args: argparse.Namespace, rows: dict[tuple[int, int, str], Outcome]) -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    command = (
        f"python -m experiments.bench_ablation --lengths {' '.join(map(str, args.lengths))} "
        f"--seeds {args.seeds} --work-limit {args.work_limit:g}"
        + (f" --fraction {args.fraction:g}" if args.fraction is not None else "")
        + (f" --headroom {args.headroom:g}" if args.headroom != 0.3 else "")
    )
    budget_rule = (
        f"the budget {args.headroom:.0%} of the way from the minimum budget to keep-all's peak"
        if args.fraction is None
        else f"{args.fraction:.0%} of keep-all's activation memory (chains below it skipped)"
    )
    defaults = (
        f"RESTART_MAX_SLICES = {exact_search.RESTART_MAX_SLICES}, "
        f"POLISH_FROM_LAYERS = {exact.POLISH_FROM_LAYERS}, PROBE_WORK = {exact_search.PROBE_WORK}"
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        "\n".join(
            [
                "# The exact method's stages, one at a time, and a plain CP-SAT call",
                "",
                f"Generated by `{command}` on {platform.machine()}, Python "
                f"{platform.python_version()}, {os.cpu_count()} CPUs (1-minute load average "
                f"{load:.1f} at the end: other jobs shared the cores, so the seconds are "
                f"inflated; the work units are not). Work limit {args.work_limit:g} units per "
                "solve (CP-SAT: one worker, deterministic). Defaults: "
                f"{defaults}. Chains: seeds 0-{args.seeds - 1} of "
                f"`random_chain(L, seed, family='mixed', version=2)` at {budget_rule}. "
                "Variants: see the script's "
                "docstring (each switches one stage against the defaults; `plain` is the same "
                "plan model in one CP-SAT call with none of the stages). An unproven solve "
                "counts as slower than any proven one in the medians; '= defaults': the switch "
                "changes nothing at that L (the defaults' outcome is repeated).",
                "",
                *([args.note, ""] if args.note else []),
                *table(rows, args.lengths, args.variants),
                "",
                "Per instance (work units; 'same makespan': every variant that found a plan "
                "found the same makespan, to 1e-6):",
                "",
                *per_instance(rows, args.variants),
                "",
            ]
        )
    )
    print(args.output.read_text())


if __name__ == "__main__":
    raise SystemExit(main())
