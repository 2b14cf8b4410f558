"""Selective: decisions inside the block. Menus (cost model v3) against whole blocks.

    python -m experiments.selective            # results/selective.md + figures/selective.png
    python -m experiments.selective --retrace  # re-trace the models (else the cached /3 JSON)
    python -m experiments.selective --gpt48-only  # only target (d)'s line and table

1. Models: every bundled traced profile, re-traced WITH menus through the
   path `planopt.runtime.bundle` uses (`Traced.profile(menus=True)`: fake
   tensors, roofline times on the bundled GPU record, fp16 autocast), and
   `profile-model`'s named models not bundled (GPT-2 medium, Llama 3.2 1B)
   at their documented batch and sequence on the transformers' record
   (h100-pcie5). The traced /3 JSON is cached under `results/selective/`.
   "Whole blocks" is the same profile with every menu stripped (equal, to the
   fingerprint, to the bundled /2 file).
2. Per model: `planopt.min_budget` (a bound over every plan; menus cannot
   lower it, cost model 12.7), the keep/recompute minimum (exact, by
   `space_min_budget`) and the keep/option/recompute minimum (bisection on
   remat-dp's proven answers); overhead at 70/50/30% of the whole-block
   keep-all (the same bytes for both) for remat-dp and pooch, menus against
   whole, with the ratio.
3. Scaling: GPT-2's traced block with its menu repeated to L = 16 .. 1000
   layers (`repeated_chain`, embedding and head kept), at 50% and 30%.

Run it under `ulimit -v 4000000` (4 GB): a solve that runs out of memory is a row
saying so. Every solve has a work limit (deterministic) and a time guard on top; a row
the guard stopped says so. CPU seconds are `time.process_time`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

from planopt import Profile, Status, budget_from_fraction, keep_all_peak, min_budget, solve
from planopt.budget import space_min_budget
from planopt.io import load_profile, save_profile
from planopt.random_chain import repeated_chain

RESULTS = Path(__file__).parent / "results"
CACHE = RESULTS / "selective"
FIGURE = Path(__file__).parent / "figures" / "selective.png"
FRACTIONS = (0.7, 0.5, 0.3)
METHODS = ("remat-dp", "pooch", "auto")
WORK = 20.0  # work units per solve
GUARD = 20.0  # seconds: the time guard on top (see the module note)
SCALE_L = (16, 64, 256, 1000)
# The bundled profiles with no block menus: per-operator chains from the zoo
# (each "layer" is one operator, so there is nothing inside it to decide).
PER_OPERATOR = (
    "gpt-12blk-b8-s1024-h100-pcie5-roofline",
    "gpt-24blk-b8-s1024-h100-pcie5-roofline",
    "gpt-48blk-b8-s1024-h100-pcie5-roofline",
    "bert-base-b32-s512-h100-pcie5-roofline",
    "resnet50-ops-b128-a100-pcie4-roofline",
)
# Hand-written or measured block profiles with no model to trace.
NO_MODEL = ("alexnet-b128-caffe-titanx", "resnet50-blocks-b128-pipedream", "vgg16-b128-pipedream")


def whole(profile: Profile) -> Profile:
    """The same profile with every menu stripped: whole blocks."""
    return profile.replace_layers([dataclasses.replace(x, options=()) for x in profile.layers])


def models():
    """The `Traced` entries: the bundled ones, then the named models not bundled."""
    from planopt.runtime.bundle import TRACED, Traced

    named = (
        Traced("gpt2-medium-b8-s1024-h100-pcie5-traced", "hf:gpt2-medium", 8, 1024, "h100-pcie5"),
        Traced("llama-1b-b4-s2048-h100-pcie5-traced", "hf:llama-1b", 4, 2048, "h100-pcie5"),
    )
    return (*TRACED, *named)


def traced(retrace: bool) -> list[tuple[str, Profile, float | None]]:
    """(name, /3 profile, tracing CPU seconds when it was traced: kept in
    `trace_cpu.json` beside the cached profiles, None if unknown)."""
    seconds_file = CACHE / "trace_cpu.json"
    seconds = json.loads(seconds_file.read_text()) if seconds_file.exists() else {}
    out = []
    for entry in models():
        path = CACHE / f"{entry.name}.json"
        if retrace or not path.exists():
            start = time.process_time()
            profile = entry.profile(menus=True)
            seconds[entry.name] = round(time.process_time() - start, 2)
            CACHE.mkdir(parents=True, exist_ok=True)
            save_profile(profile, path)
            seconds_file.write_text(json.dumps(seconds, indent=1, sort_keys=True) + "\n")
        else:
            profile = load_profile(path)
        out.append((entry.name, profile, seconds.get(entry.name)))
    return out


@dataclass(frozen=True)
class Run:
    """One solve: status, overhead over T_ideal (None: no plan), gap, work, CPU seconds."""

    status: str
    overhead: float | None
    gap: float | None
    work: float
    cpu: float
    guarded: bool  # stopped by the time guard, not the work limit


def run(
    profile: Profile, budget: int, method: str, work: float | None = WORK, guard: float = GUARD
) -> Run:
    start = time.process_time()
    try:
        sol = solve(profile, budget, method, work_limit=work, time_limit=guard)
    except MemoryError:  # the run's address space is capped (`ulimit -v`): say so
        return Run("out of memory", None, None, math.nan, time.process_time() - start, False)
    cpu = time.process_time() - start
    overhead = None if sol.schedule is None else sol.schedule.makespan / profile.t_ideal - 1
    stopped = sol.status in (Status.FEASIBLE, Status.TIMEOUT) and "limit" in sol.message
    guarded = stopped and (work is None or sol.work_used < work)
    return Run(sol.status.value, overhead, sol.gap, float(sol.work_used), cpu, bool(guarded))


@dataclass(frozen=True)
class Minimum:
    """The keep/option/recompute minimum: `low <= minimum <= high`, proven equal or not."""

    low: int
    high: int
    cpu: float

    @property
    def exact(self) -> bool:
        return self.low == self.high


def menu_minimum(profile: Profile, work: float = WORK, guard: float = GUARD) -> Minimum:
    """Bisection on remat-dp over menus: `high` a budget a plan meets (its peak), every
    budget below `low` proven infeasible. Starts from `min_budget` (no plan needs less)
    and the keep/recompute minimum (a plan of the menu space meets it)."""
    start = time.process_time()
    low = min_budget(profile)
    high = space_min_budget(whole(profile), "recompute-only").value
    while low < high:
        mid = (low + high) // 2
        sol = solve(profile, mid, "remat-dp", work_limit=work, time_limit=guard)
        if sol.schedule is not None:
            high = min(high, sol.schedule.peak_bytes)
        elif sol.status is Status.INFEASIBLE:
            low = mid + 1
        else:  # cut short: the bracket is what is known
            break
    return Minimum(low, high, time.process_time() - start)


@dataclass(frozen=True)
class ModelRow:
    name: str
    layers: int
    menus: int  # layers with a menu
    options: int
    trace_cpu: float | None
    min_budget: int
    keep_all: int
    whole_min: int  # keep/recompute minimum (exact)
    menu_min: Minimum
    runs: dict  # (fraction, method, "menus"|"whole") -> Run


def model_row(name: str, profile: Profile, trace_cpu=None, fractions=FRACTIONS, work=WORK):
    bare = whole(profile)
    runs = {}
    for f in fractions:
        budget = budget_from_fraction(bare, f)
        for method in METHODS:
            runs[(f, method, "menus")] = run(profile, budget, method, work)
            runs[(f, method, "whole")] = run(bare, budget, method, work)
    return ModelRow(
        name,
        len(profile.layers),
        sum(1 for x in profile.layers if x.options),
        sum(len(x.options) for x in profile.layers),
        trace_cpu,
        min_budget(profile),
        keep_all_peak(bare),
        space_min_budget(bare, "recompute-only").value,
        menu_minimum(profile, work),
        runs,
    )


def scaled(block_source: Profile, L: int) -> Profile:
    """`block_source`'s first block repeated to L layers, its first and last layer kept."""
    layers = block_source.layers
    body = repeated_chain([layers[1]], L - 2, [layers[0]], [layers[-1]])
    return block_source.replace_layers(body)


def scale_rows(
    source: Profile, sizes=SCALE_L, fractions=(0.5, 0.3), methods=("remat-dp", "pooch"), work=WORK
):
    """(L, fraction, method, variant) -> Run on the repeated chains."""
    out = {}
    for L in sizes:
        profile = scaled(source, L)
        bare = whole(profile)
        for f in fractions:
            budget = budget_from_fraction(bare, f)
            for method in methods:
                out[(L, f, method, "menus")] = run(profile, budget, method, work)
                out[(L, f, method, "whole")] = run(bare, budget, method, work)
    return out


def gpt48_rows(source: Profile, fractions=FRACTIONS, seconds: float = 5.0) -> dict:
    """Target (d): `blocks` on GPT-2's traced block repeated 48 times (embedding and head
    kept), menus and whole, under the target's time limit (no work limit)."""
    profile = scaled(source, 50)
    bare = whole(profile)
    out = {}
    for f in fractions:
        budget = budget_from_fraction(bare, f)
        for variant, prof in (("menus", profile), ("whole", bare)):
            out[(f, variant)] = run(prof, budget, "blocks", None, seconds)
    return out


def why_only(path: Path) -> int:
    """Replace the "Why" paragraph and the v3.1 table of `path` (made by this module) with
    what `render` writes now: it reads only cached files (`selective_report.why_paragraph`),
    so the solved tables, load-dependent rows included, stay as they were."""
    from experiments.selective_report import why_paragraph

    lines = path.read_text().split("\n")
    start = next(k for k, x in enumerate(lines) if x.startswith("**Why (a)"))
    end = lines.index("## Models and minimum budgets")
    path.write_text("\n".join([*lines[:start], *why_paragraph(), *lines[end:]]))
    return 0


def gpt48_only(path: Path) -> int:
    """Re-run target (d)'s rows alone (`gpt48_rows`, about a minute) and replace its line
    and its table in `path` (made by this module); the other tables stay as they were."""
    from experiments.selective_report import gpt48_section, target_d

    gpt2 = next(p for n, p, _ in traced(False) if n.startswith("gpt2-b8"))
    gpt48 = gpt48_rows(gpt2)
    lines = path.read_text().split("\n")
    lines[next(k for k, x in enumerate(lines) if x.startswith("- **(d) "))] = target_d(gpt48)
    start = lines.index("## blocks on a GPT-48-size traced model (target d)")
    end = next(k for k in range(start + 1, len(lines)) if lines[k].startswith("## "))
    section: list[str] = []
    gpt48_section(gpt48, section)
    path.write_text("\n".join([*lines[:start], *section, *lines[end:]]))
    return 0


def main(argv: list[str] | None = None) -> int:
    from experiments.selective_report import figure, render

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retrace", action="store_true", help="trace the models again")
    parser.add_argument("--work", type=float, default=WORK, help="work units per solve")
    parser.add_argument(
        "--why-only", action="store_true", help="re-render only the Why paragraph (no solves)"
    )
    parser.add_argument(
        "--gpt48-only", action="store_true", help="re-run only target (d)'s rows and line"
    )
    args = parser.parse_args(argv)
    if args.why_only:
        return why_only(RESULTS / "selective.md")
    if args.gpt48_only:
        return gpt48_only(RESULTS / "selective.md")
    start = time.process_time()
    rows = [model_row(n, p, s, work=args.work) for n, p, s in traced(args.retrace)]
    gpt2 = next(p for n, p, _ in traced(False) if n.startswith("gpt2-b8"))
    scale = scale_rows(gpt2, methods=("remat-dp", "pooch"), work=args.work)
    gpt48 = gpt48_rows(gpt2)
    curves = figure(rows, {n: p for n, p, _ in traced(False)}, FIGURE, args.work)
    text = render(rows, scale, curves, args.work, time.process_time() - start, gpt48)
    (RESULTS / "selective.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
