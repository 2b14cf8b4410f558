"""`planopt demo`: every planner on every bundled net at 70, 50 and 30% budgets.

Built on the sweep machinery (`planopt.experiment.sweep`): one `Job` per
(net, budget, method), run by `run_sweep` in parallel with a progress bar,
not cached (a demo shows what this code does now).

NOTE (the default run): the searches (every method that is not one of the
registry's starters: blocks, lns, auto, ...) would use any time they are
given, so the default run bounds each of their solves by work units
(`DEMO_WORK_LIMIT`), never by seconds, and runs the exact methods only on
nets small enough to prove their optimum at once (`DEMO_EXACT_MAX_LAYERS`,
no time limit): the default table is then the same on any machine. The
starters (the baselines and the published greedy: a few simulations per
layer) always run to completion, since a greedy cut short is not the
greedy. `--full` is the long comparison: exact methods up to 40 layers
and every solve limited to 5 s instead.

NOTE (one rule for every row). The starters finish inside every method too
(`solvers.search.starts`: their own work cap, outside the limit), so no
row is worse than the starts its method names, and a row's work can exceed
the limit by what its starters used; the footer says so, and what each
status means (`STATUS_HELP`).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from concurrent.futures import Executor

from tqdm import tqdm

from planopt import registry
from planopt.budget import keep_all_peak, min_budget, min_memory_plan
from planopt.bundled import bundled_profile, bundled_profile_names
from planopt.cli.args import (
    WORK_UNIT_HELP,
    positive_int,
    seed,
    time_limit,
    whole_bytes,
    work_limit,
)
from planopt.cli.common import EXIT_OK, AddCommand, dump
from planopt.errors import PlanoptError
from planopt.experiment.sweep import DEFAULT_WORKERS, ERROR, Job, Result, SerialExecutor, run_sweep
from planopt.profile import Profile
from planopt.report import gib, human_bytes, human_seconds, percent, table
from planopt.simulate import Scorer

DEMO_FRACTIONS = (0.7, 0.5, 0.3)
DEMO_WORK_LIMIT = 0.5
DEMO_EXACT_MAX_LAYERS = 12
FULL_TIME_LIMIT = 5.0
FULL_EXACT_MAX_LAYERS = 40
# Given to every method that declares it: the demo already runs one solve per core,
# and a single-threaded CP-SAT is deterministic.
WORKER_OPTIONS = {"threads": 1}
# The footer's key to the status column.
STATUS_HELP = (
    ("optimal", "proven fastest in the method's plan space"),
    (
        "feasible",
        "fits the budget, not proven fastest (a heuristic, or a search the limit "
        "stopped: its best plan)",
    ),
    (
        "infeasible",
        "proven: no plan of the method's space fits (below the min budget no plan "
        "at all; a fixed baseline's space is its one plan, remat-dp's the keep/recompute plans)",
    ),
    (
        "no plan found",
        "a heuristic found none, which proves nothing",
    ),
    ("timeout", "the work or time limit came before any plan was found"),
    ("bound", "a bound-only method: a proven lower bound on the time, no plan"),
    ("skipped", "an exact method not run: the net has more layers than --exact-max-layers"),
)


def register(command: AddCommand) -> None:
    p = command(
        "demo",
        "compare every available planner (baselines, heuristics, exact methods) on the "
        "bundled nets at budgets of 70, 50 and 30 percent of keep-all activation memory",
        run,
    )
    p.add_argument(
        "--work-limit",
        metavar="N",
        type=work_limit,
        help=f"each search stops after N {WORK_UNIT_HELP}; the starters (baselines, the "
        f"greedy) always finish (default: {DEMO_WORK_LIMIT:g}; with --full: none)",
    )
    p.add_argument(
        "--time-limit",
        metavar="S",
        type=time_limit,
        help=f"seconds per solve (default: none; with --full: {FULL_TIME_LIMIT:g})",
    )
    p.add_argument(
        "--exact-max-layers",
        metavar="N",
        type=positive_int,
        help=f"run exact methods only on nets of at most N layers (default: "
        f"{DEMO_EXACT_MAX_LAYERS}; with --full: {FULL_EXACT_MAX_LAYERS}); larger nets "
        "get a 'skipped' row",
    )
    p.add_argument(
        "--full",
        action="store_true",
        help=f"the long comparison: searches limited by {FULL_TIME_LIMIT:g} s instead of "
        f"work, exact methods up to {FULL_EXACT_MAX_LAYERS} layers (several minutes)",
    )
    p.add_argument("--seed", metavar="N", type=seed, default=0, help="random seed (default: 0)")
    p.add_argument(
        "--workers",
        metavar="N",
        type=positive_int,
        default=DEFAULT_WORKERS,
        help=f"parallel processes (default: {DEFAULT_WORKERS})",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (no progress bar)")


def settings(args: argparse.Namespace) -> tuple[float | None, float | None, int]:
    """`(work_limit, time_limit, exact_max_layers)`: the flags, else the mode's defaults."""
    if args.full:
        defaults = (None, FULL_TIME_LIMIT, FULL_EXACT_MAX_LAYERS)
    else:
        defaults = (DEMO_WORK_LIMIT, None, DEMO_EXACT_MAX_LAYERS)
    given = (args.work_limit, args.time_limit, args.exact_max_layers)
    work, seconds, exact_max = (d if g is None else g for g, d in zip(given, defaults, strict=True))
    return work, seconds, exact_max


def make_executor(workers: int) -> Executor | None:
    """One worker runs in this process (debugging, tests); more, a process pool."""
    return SerialExecutor() if workers == 1 else None


def make_jobs(
    profiles: Sequence[Profile],
    methods: Sequence[str],
    *,
    work: float | None,
    seconds: float | None,
    exact_max: int,
    seed_: int,
) -> list[Job]:
    """Every (net, budget, method), budgets below the minimum included (their row says
    so). Exact methods get `max_layers` where they declare it, so a larger net is refused
    by the method itself and shows as a 'skipped' row."""
    starters = set(registry.starters())
    jobs = []
    for profile in profiles:
        for fraction in DEMO_FRACTIONS:
            for method in methods:
                spec = registry.get(method)
                declared = set(spec.options()) if spec.is_available() else set()
                options = {k: v for k, v in WORKER_OPTIONS.items() if k in declared}
                if spec.exact and "max_layers" in declared:
                    options["max_layers"] = exact_max
                jobs.append(
                    Job.make(
                        profile,
                        fraction,
                        method,
                        options,
                        time_limit=seconds,
                        seed=seed_,
                        work_limit=None if method in starters else work,
                    )
                )
    return jobs


def row(result: Result) -> dict:
    """One table row (and `--json` entry); an exact method's refusal is a 'skipped' row,
    any other refusal is the user's error and stops the demo."""
    if result.status == ERROR:
        if not registry.get(result.method).exact:
            raise PlanoptError(result.message)
        status = "skipped"
    else:
        status = result.status
    return {
        "method": result.method,
        "budget_fraction": result.budget_fraction,
        "budget": whole_bytes(result.budget),
        "status": status,
        "feasible": result.fits,
        "time": result.makespan,
        "overhead": result.overhead,
        "peak_bytes": result.peak_bytes,
        "lower_bound": result.lower_bound,
        "solve_seconds": result.solve_seconds,
        "work_limit": result.work_limit,
        "work_used": result.work_used,
        "message": result.message,
    }


def net_summary(profile: Profile, rows: list[dict]) -> dict:
    """The net's figures: `min_budget_exact` says whether the min budget is the smallest
    any plan meets or only a lower bound (then `min_budget_upper`, the minimum-memory
    plan's peak, is a budget some plan meets: the minimum lies between)."""
    peak, minimum = keep_all_peak(profile), min_budget(profile)
    upper = Scorer(profile).score_plan(min_memory_plan(profile))[1]
    activations = peak - profile.static_bytes

    def share(value: int) -> float:
        return (value - profile.static_bytes) / activations if activations > 0 else 0.0

    return {
        "profile": profile.name,
        "layers": len(profile.layers),
        "t_ideal": profile.t_ideal,
        "keep_all_peak": peak,
        "min_budget": minimum,
        "min_budget_fraction": share(minimum),
        "min_budget_exact": upper == minimum,
        "min_budget_upper": upper,
        "min_budget_upper_fraction": share(upper),
        "results": rows,
    }


def min_budget_text(net: dict) -> str:
    """`min budget 1.46 GiB (23%)`, or the bracket when it is only a lower bound."""
    low = f"{human_bytes(net['min_budget'])} ({net['min_budget_fraction']:.0%})"
    if net["min_budget_exact"]:
        return f"min budget {low}"
    high = f"{human_bytes(net['min_budget_upper'])} ({net['min_budget_upper_fraction']:.0%})"
    return f"min budget between {low}, a lower bound, and {high}, the minimum-memory plan's"


def net_table(net: dict) -> str:
    header = (
        f"== {net['profile']}: {net['layers']} layers, T_ideal {human_seconds(net['t_ideal'])}, "
        f"keep-all peak {human_bytes(net['keep_all_peak'])}, {min_budget_text(net)} =="
    )
    cells = [
        [
            r["method"],
            f"{r['budget_fraction']:.0%}",
            gib(r["budget"]),
            r["status"],
            percent(r["overhead"]),
            gib(r["peak_bytes"]),
            "-" if r["work_used"] is None else f"{r['work_used']:.3f}",
        ]
        for r in net["results"]
    ]
    headers = ["method", "budget", "(GiB)", "status", "overhead", "peak (GiB)", "work"]
    return header + "\n" + table(headers, cells, right=(1, 2, 4, 5, 6)) + "\n"


class _Printer:
    """Prints each net's table once all its solves are done, nets in bundled order and
    rows in job order (so the output reads the same however the pool orders solves)."""

    def __init__(self, profiles: Sequence[Profile], jobs: Sequence[Job]) -> None:
        self.profiles = list(profiles)
        self.keys: dict[str, list[str]] = {p.name: [] for p in self.profiles}
        for job in jobs:
            self.keys[job.profile.name].append(job.key())
        self.done: dict[str, Result] = {}
        self.next = 0

    def __call__(self, result: Result) -> None:
        self.done[result.key] = result
        while self.next < len(self.profiles):
            profile = self.profiles[self.next]
            keys = self.keys[profile.name]
            if not all(key in self.done for key in keys):
                return
            rows = [row(self.done[key]) for key in keys]
            tqdm.write(net_table(net_summary(profile, rows)), file=sys.stdout)
            sys.stdout.flush()  # each net's table as soon as it is done, even in a pipe
            self.next += 1


def run(args: argparse.Namespace) -> int:
    work, seconds, exact_max = settings(args)
    methods = registry.planners()
    profiles = [bundled_profile(name) for name in bundled_profile_names()]
    jobs = make_jobs(
        profiles, methods, work=work, seconds=seconds, exact_max=exact_max, seed_=args.seed
    )
    started = time.monotonic()
    printer = None if args.json else _Printer(profiles, jobs)
    results = run_sweep(
        jobs,
        executor=make_executor(args.workers),
        cache=None,
        max_workers=args.workers,
        progress=not args.json,
        desc="demo",
        on_result=printer,
    )
    elapsed = time.monotonic() - started
    by_net: dict[str, list[dict]] = {p.name: [] for p in profiles}
    for result in results:
        by_net[result.profile].append(row(result))
    if args.json:
        dump(
            {
                "work_limit": work,
                "time_limit": seconds,
                "exact_max_layers": exact_max,
                "budget_fractions": list(DEMO_FRACTIONS),
                "methods": methods,
                "nets": [net_summary(p, by_net[p.name]) for p in profiles],
                "seconds": elapsed,
            }
        )
    else:
        limits = f"work limit {'none' if work is None else f'{work:g}'} per search"
        limits += f", time limit {'none' if seconds is None else f'{seconds:g} s'} per solve"
        print(footer(len(jobs), len(profiles), len(methods), elapsed, limits, exact_max))
    return EXIT_OK


def footer(jobs: int, nets: int, methods: int, elapsed: float, limits: str, exact_max: int) -> str:
    """What the tables show and the rule every row ran under (see the module NOTE)."""
    from solvers.starters import STARTS_WORK

    starters = ", ".join(registry.starters())
    lines = [
        f"{jobs} solves on {nets} bundled nets with {methods} methods in {elapsed:.1f} s "
        f"({limits}; exact methods on nets of at most {exact_max} layers). Budgets are "
        "fractions of keep-all activation memory; overhead is T / T_ideal - 1; work is the "
        "work units each solve used.",
        f"One rule for every row: the starters ({starters}) always run to the end, in their "
        "own rows (no work limit) and inside every other method, which starts from the "
        "fastest of them and never returns a slower plan; their work counts in the method's "
        "work, and the work limit bounds what the method does after them. So a row's work "
        "can exceed the limit: the greedy always "
        f"finishes (its cap: {STARTS_WORK:g} units or the limit, whichever is more; a method's "
        "message says when it did not).",
        "status:",
        *(f"  {word:<14} {meaning}" for word, meaning in STATUS_HELP),
    ]
    return "\n".join(lines)
