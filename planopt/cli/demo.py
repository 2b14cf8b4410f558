"""`planopt demo`: every method on every bundled net at 70, 50 and 30% budgets."""

from __future__ import annotations

import argparse
import sys
import time

from planopt import registry
from planopt.api import solve
from planopt.budget import budget_from_fraction, keep_all_peak, min_budget
from planopt.bundled import bundled_profile, bundled_profile_names
from planopt.cli.args import time_limit
from planopt.cli.common import EXIT_OK, AddCommand, dump
from planopt.errors import SolverOptionError
from planopt.profile import Profile
from planopt.report import gib, human_bytes, human_seconds, percent, table
from planopt.result import Solution

DEMO_FRACTIONS = (0.7, 0.5, 0.3)
DEMO_SKIPPED = ("brute-force",)  # the test oracle: exponential, never a contender
DEMO_TIME_LIMIT = 5.0
DEMO_EXACT_MAX_LAYERS = 40


def register(command: AddCommand) -> None:
    p = command(
        "demo",
        "compare every available method on the bundled nets at budgets of 70, 50 and 30 "
        "percent of keep-all activation memory",
        run,
    )
    p.add_argument(
        "--time-limit",
        metavar="S",
        type=time_limit,
        default=DEMO_TIME_LIMIT,
        help=f"seconds per solve (default: {DEMO_TIME_LIMIT:g})",
    )
    p.add_argument("--seed", metavar="N", type=int, default=0, help="random seed (default: 0)")
    p.add_argument(
        "--exact-max-layers",
        metavar="N",
        type=int,
        default=DEMO_EXACT_MAX_LAYERS,
        help=f"run exact methods only on nets of at most N layers (default: "
        f"{DEMO_EXACT_MAX_LAYERS}); larger nets get a 'skipped' row",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _demo_row(
    method: str, fraction: float, budget: float, solution: Solution | None, message: str
) -> dict:
    if solution is None:
        return {
            "method": method,
            "budget_fraction": fraction,
            "budget": budget,
            "status": "skipped",
            "message": message,
        }
    return {"method": method, "budget_fraction": fraction, **solution.to_dict()}


def _demo_net(profile: Profile, methods: list[str], args: argparse.Namespace, bar) -> list[dict]:
    """Every method at every demo budget on one net; `bar` is the tqdm progress bar."""
    rows = []
    for fraction in DEMO_FRACTIONS:
        budget = budget_from_fraction(profile, fraction)
        for method in methods:
            bar.set_description_str(f"{profile.name} {method} {fraction:.0%}")
            try:
                exact = registry.get(method).exact
                options = {"max_layers": args.exact_max_layers} if exact else {}
                solution = solve(
                    profile, budget, method, time_limit=args.time_limit, seed=args.seed, **options
                )
            except SolverOptionError as exc:
                if not registry.get(method).exact:
                    raise
                rows.append(_demo_row(method, fraction, budget, None, str(exc)))
            else:
                rows.append(_demo_row(method, fraction, budget, solution, solution.message))
            bar.update(1)
    return rows


def _demo_table(rows: list[dict]) -> str:
    cells = []
    for row in rows:
        cells.append(
            [
                row["method"],
                f"{row['budget_fraction']:.0%}",
                gib(row["budget"]),
                row["status"],
                percent(row.get("overhead")),
                gib(row.get("peak_bytes")),
                "-" if "solve_seconds" not in row else f"{row['solve_seconds']:.2f}",
            ]
        )
    headers = ["method", "budget", "(GiB)", "status", "overhead", "peak (GiB)", "solve (s)"]
    return table(headers, cells, right=(1, 2, 4, 5, 6))


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    names = bundled_profile_names()
    methods = [m for m in registry.available() if m not in DEMO_SKIPPED]
    profiles = [bundled_profile(name) for name in names]
    total = len(profiles) * len(DEMO_FRACTIONS) * len(methods)
    started = time.monotonic()
    nets = []
    with tqdm(total=total, unit="solve", file=sys.stderr, disable=not sys.stderr.isatty()) as bar:
        for profile in profiles:
            rows = _demo_net(profile, methods, args, bar)
            peak, minimum = keep_all_peak(profile), min_budget(profile)
            activations = peak - profile.static_bytes
            net = {
                "profile": profile.name,
                "layers": len(profile.layers),
                "t_ideal": profile.t_ideal,
                "keep_all_peak": peak,
                "min_budget": minimum,
                "min_budget_fraction": (
                    (minimum - profile.static_bytes) / activations if activations > 0 else 0.0
                ),
                "results": rows,
            }
            nets.append(net)
            if not args.json:
                tqdm.write(_demo_header(net) + "\n" + _demo_table(rows) + "\n", file=sys.stdout)
                sys.stdout.flush()  # each net's table as soon as it is done, even in a pipe
    elapsed = time.monotonic() - started
    if args.json:
        dump(
            {
                "time_limit": args.time_limit,
                "budget_fractions": list(DEMO_FRACTIONS),
                "methods": methods,
                "nets": nets,
                "seconds": elapsed,
            }
        )
    else:
        print(
            f"{total} solves on {len(profiles)} bundled nets with {len(methods)} methods "
            f"in {elapsed:.1f} s (time limit {args.time_limit:g} s per solve). Budgets are "
            "fractions of keep-all activation memory; overhead is T / T_ideal - 1."
        )
    return EXIT_OK


def _demo_header(net: dict) -> str:
    return (
        f"== {net['profile']}: {net['layers']} layers, T_ideal {human_seconds(net['t_ideal'])}, "
        f"keep-all peak {human_bytes(net['keep_all_peak'])}, "
        f"min budget {human_bytes(net['min_budget'])} ({net['min_budget_fraction']:.0%}) =="
    )
