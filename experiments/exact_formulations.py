"""The exact model's memory resource stated three ways, measured in work units (issue 24, item 3).

Run from the repository root (a few minutes with the defaults):

    python -m experiments.exact_formulations     # writes experiments/results/exact_formulations.md

The plan model (`solvers.model.build`) is the same for every row; only the
CP-SAT statement of its memory resource differs
(`solvers.backends.cpsat.translate(memory=...)`):

* `cumulative`: every tensor an (optional) interval on one cumulative
  resource of the budget's capacity (planopt's default);
* `reservoir`: an event ordering: +demand at each present interval's start,
  -demand at its end, the running level within [0, capacity] after every
  instant (CP-SAT's reservoir constraint);
* `both`: each a redundant check of the other.

Instances: `planopt.random_chain(L, seed, version=2)` chains ("/2"), and the
same chains with a menu of partial options on two layers in three ("/3":
keep half the internals for 40% of the forward, or none for 90%), at 30% of
keep-all activation memory, or, where 30% is below the minimum budget (most
of these chains), at the minimum plus 2% of the way to keep-all.
Each solve gets the same hint (the greedy's plan, when it fits), one
worker, seed 0 and `--work` units of CP-SAT deterministic time: outcomes do
not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import planopt
from planopt.budget import budget_from_fraction, keep_all_peak, min_budget
from planopt.profile import LayerOption
from solvers.backends.cpsat import run_isolated, translate
from solvers.model import build, evaluate

FORMULATIONS = ("cumulative", "reservoir", "both")
OUT = Path("experiments/results/exact_formulations.md")


def menu_chain(n: int, seed: int) -> planopt.Profile:
    """The /2 chain with a menu on two layers in three (see the module doc)."""
    base = planopt.random_chain(n, seed=seed, family="mixed", version=2)
    layers = []
    for i, x in enumerate(base.layers):
        if (i + seed) % 3 == 2:
            layers.append(x)
            continue
        x = dataclasses.replace(x, saved_bytes=x.saved_bytes or x.out_bytes)
        menu = [LayerOption("half", x.saved_bytes // 2, x.fwd * 0.4, (0,))]
        if (i + seed) % 2:
            menu.append(LayerOption("drop-all", 0, x.fwd * 0.9, (), x.fwd_work_bytes // 2))
        layers.append(dataclasses.replace(x, options=tuple(menu)))
    return base.replace_layers(layers, name=f"{base.name}-menus")


def tight_budget(profile, fraction: float) -> int:
    """`fraction` of keep-all, or (where that is below the minimum budget, as on most
    /2 chains at 30%) the minimum plus 2% of the way to keep-all."""
    low = min_budget(profile)
    wanted = budget_from_fraction(profile, fraction)
    return max(wanted, low + (keep_all_peak(profile) - low) // 50)


def solve_one(profile, budget, memory: str, work: float) -> dict:
    form = build(profile, budget)
    greedy = planopt.solve(profile, budget, "pooch")
    hint = None
    if greedy.plan is not None and greedy.schedule.feasible:
        hint = evaluate(form, form.decisions(greedy.plan))
    model, xs = translate(form, hint, None, memory=memory)
    params = {
        "max_time_in_seconds": None,
        "max_deterministic_time": work,
        "num_workers": 1,
        "random_seed": 0,
        "relative_gap_limit": 0.0,
        "interleave_search": False,
    }
    t0 = time.monotonic()
    code, values, _, bound, used = run_isolated(model, xs, params)
    wall = time.monotonic() - t0
    t_ideal = profile.t_ideal
    over = None
    if values is not None:
        plan = form.decode(lambda v: values[v])
        schedule = planopt.simulate(profile, plan)
        assert schedule.peak_bytes <= budget, (profile.name, memory)  # re-scored, as api does
        over = schedule.makespan / t_ideal - 1
    return {
        "status": {4: "optimal", 2: "feasible", 3: "infeasible"}.get(code, "unknown"),
        "overhead": over,
        "bound": None if bound is None else form.seconds(bound) / t_ideal - 1,
        "work": used,
        "wall": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[12, 16, 20])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--work", type=float, default=10.0)
    ap.add_argument("--fraction", type=float, default=0.3)
    args = ap.parse_args()
    rows = []
    for n in args.lengths:
        for seed in args.seeds:
            for version, profile in (
                ("/2", planopt.random_chain(n, seed=seed, family="mixed", version=2)),
                ("/3", menu_chain(n, seed)),
            ):
                budget = tight_budget(profile, args.fraction)
                for memory in FORMULATIONS:
                    r = solve_one(profile, budget, memory, args.work)
                    rows.append((n, seed, version, memory, r))
                    print(n, seed, version, memory, r, flush=True)
    write(rows, args)


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def write(rows, args) -> None:
    lines = [
        "# The exact model's memory resource: three CP-SAT statements (issue 24, item 3)",
        "",
        f"`python -m experiments.exact_formulations --lengths {' '.join(map(str, args.lengths))} "
        f"--seeds {' '.join(map(str, args.seeds))} --work {args.work:g}`: random mixed chains "
        f"at {100 * args.fraction:.0f}% of keep-all activation memory (or the minimum budget plus "
        "2% of the way to keep-all, where that is higher), one CP-SAT worker, seed 0, "
        f"{args.work:g} work units each, the greedy's plan as the hint. Overhead over `T_ideal` "
        "of the plan found (re-scored by the simulator) and of CP-SAT's bound.",
        "",
        "| L | seed | profile | memory | status | plan | bound | work units | wall s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n, seed, version, memory, r in rows:
        lines.append(
            f"| {n} | {seed} | {version} | {memory} | {r['status']} | {_pct(r['overhead'])} | "
            f"{_pct(r['bound'])} | {r['work']:.2f} | {r['wall']:.1f} |"
        )
    lines += ["", "## Summary", "", "| memory | proven | mean work units | mean bound gap |"]
    lines.append("| --- | --- | --- | --- |")
    for memory in FORMULATIONS:
        mine = [r for *_, mem, r in rows if mem == memory]
        proven = sum(r["status"] in ("optimal", "infeasible") for r in mine)
        gaps = [
            r["overhead"] - r["bound"]
            for r in mine
            if r["overhead"] is not None and r["bound"] is not None
        ]
        mean_work = sum(r["work"] for r in mine) / max(1, len(mine))
        gap = sum(gaps) / len(gaps) if gaps else None
        lines.append(f"| {memory} | {proven} of {len(mine)} | {mean_work:.2f} | {_pct(gap)} |")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
