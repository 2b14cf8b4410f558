"""`planopt experiment sweep|suite`: the experiment machinery on the command line.

`sweep` runs your profiles (files, bundled names, seeded random chains)
through every available method at the budgets you give, and writes tables,
figures and the robustness study. `suite` runs the report's configuration.
Both cache every outcome (default `.planopt-cache/`), so an interrupted run
resumes where it stopped.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from planopt.errors import PlanoptError
from planopt.experiment.cache import DEFAULT_CACHE_DIR
from planopt.experiment.jobs import default_methods, make_jobs, parse_random
from planopt.experiment.robustness import Noise
from planopt.experiment.sweep import DEFAULT_WORKERS, run_sweep

DEFAULT_BUDGETS = ("70%", "50%", "30%")


def budget_fraction(text: str) -> float:
    """argparse type: `50%` or `0.5` (a share of keep-all activation memory)."""
    raw = text[:-1] if text.endswith("%") else text
    try:
        value = float(raw) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"budget must be a percentage (50%) or fraction (0.5) of keep-all activation "
            f"memory, got {text!r}"
        ) from None
    if not 0 <= value <= 10:
        raise argparse.ArgumentTypeError(f"budget must be between 0% and 1000%, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def _noise(text: str) -> float:
    try:
        value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"noise must be in [0, 1) (or 0% to 99%), got {text!r}")
    return value


def _cache_arg(args: argparse.Namespace):
    return None if args.no_cache else args.cache


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workers",
        type=_positive_int,
        default=DEFAULT_WORKERS,
        metavar="N",
        help=f"parallel processes (default: {DEFAULT_WORKERS})",
    )
    p.add_argument(
        "--cache",
        metavar="DIR",
        default=DEFAULT_CACHE_DIR,
        help=f"result cache folder (default: {DEFAULT_CACHE_DIR})",
    )
    p.add_argument("--no-cache", action="store_true", help="recompute everything, store nothing")
    p.add_argument("--no-plots", action="store_true", help="tables only (no matplotlib needed)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _print_written(headline: dict) -> None:
    for path in headline["files"]:
        print(f"wrote {path}")
    for figure, reason in headline.get("figures_skipped", []):
        print(f"no figure {figure}: {reason}")


def _cmd_sweep(args: argparse.Namespace) -> int:
    from planopt.bundled import bundled_profile, bundled_profile_names
    from planopt.cli import load_profile_arg
    from planopt.experiment.outputs import write_outputs

    profiles: list = [load_profile_arg(p) for p in args.profiles]
    if args.all_bundled:
        profiles += [bundled_profile(n) for n in bundled_profile_names()]
    for spec in args.random or []:
        profiles += parse_random(spec)
    if not profiles:
        raise PlanoptError(
            "experiment sweep: give at least one PROFILE, --all-bundled or --random "
            "FAMILY:L1,L2:SEEDS"
        )
    names = [p[0].name if isinstance(p, tuple) else p.name for p in profiles]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise PlanoptError(f"experiment sweep: profile names must be unique, got {dup} twice")
    methods = args.methods or default_methods()
    jobs = make_jobs(
        profiles,
        args.budgets,
        methods,
        time_limit=args.time_limit,
        exact_max_layers=args.exact_max_layers,
        bound=not args.no_bound,
    )
    if not jobs:
        raise PlanoptError(
            "experiment sweep: no job to run: every budget is below the minimum budget of "
            "every profile (see `planopt show PROFILE` for each one's minimum)"
        )
    results = run_sweep(
        jobs,
        cache=_cache_arg(args),
        max_workers=args.workers,
        progress=not args.quiet,
    )
    out = Path(args.out)
    scenarios = (
        Noise(f"times +-{args.noise:.0%}", times=args.noise, bandwidth=args.noise),
        Noise(
            f"times and sizes +-{args.noise:.0%}",
            times=args.noise,
            bandwidth=args.noise,
            sizes=args.noise,
        ),
    )
    headline = write_outputs(
        results,
        {job.profile.name: job.profile for job in jobs},
        out / "tables",
        None if args.no_plots else out / "figures",
        draws=args.draws,
        scenarios=scenarios,
        preamble=f"Generated by `planopt experiment sweep` ({len(jobs)} jobs).",
    )
    _print_written(headline)
    return 0


def _cmd_suite(args: argparse.Namespace) -> int:
    from planopt.experiment.suite import DEFAULT, LARGE, run_suite

    config = LARGE if args.large else DEFAULT
    command = "planopt experiment suite" + (" --large" if args.large else "")
    if args.out != "experiments":
        command += f" --out {args.out}"
    headline = run_suite(
        args.out,
        config,
        cache=_cache_arg(args),
        max_workers=args.workers,
        plots=not args.no_plots,
        progress=not args.quiet,
        command=command,
    )
    _print_written(headline)
    print(f"{headline['jobs']} jobs, {headline['computed']} computed, {headline['seconds']:.0f} s")
    return 0


def add_experiment_command(
    command: Callable[[str, str, Callable[[argparse.Namespace], int]], argparse.ArgumentParser],
) -> None:
    """Register `experiment` and its subcommands through cli.py's `command` helper."""
    group = command(
        "experiment",
        "sweep methods x profiles x budgets: cached, parallel; tables, figures, robustness",
        lambda _args: 0,
    )
    sub = group.add_subparsers(dest="experiment_command", required=True, metavar="SUBCOMMAND")

    p = sub.add_parser(
        "sweep",
        help="run your profiles through the methods; write tables and figures",
        description=(
            "Run every (profile, budget, method) job, cached by content so an interrupted "
            "sweep resumes, then write tables (CSV + Markdown) to OUT/tables and figures "
            "(PNG + SVG) to OUT/figures, including the robustness study."
        ),
    )
    p.set_defaults(run=_cmd_sweep)
    p.add_argument("profiles", nargs="*", metavar="PROFILE", help="profile file or bundled name")
    p.add_argument("--all-bundled", action="store_true", help="add every bundled profile")
    p.add_argument(
        "--random",
        action="append",
        metavar="FAMILY:L1,L2:SEEDS",
        help="add seeded random chains (family uniform, cnn, transformer or mixed); repeatable",
    )
    p.add_argument(
        "--budgets",
        nargs="+",
        type=budget_fraction,
        default=[budget_fraction(b) for b in DEFAULT_BUDGETS],
        metavar="B",
        help="shares of keep-all activation memory, 50%% or 0.5 (default: "
        + " ".join(DEFAULT_BUDGETS).replace("%", "%%")
        + ")",
    )
    p.add_argument("--methods", nargs="+", metavar="M", help="default: every available method")
    p.add_argument(
        "--time-limit", type=float, default=60.0, metavar="S", help="per solve (default: 60)"
    )
    p.add_argument(
        "--exact-max-layers",
        type=_positive_int,
        default=32,
        metavar="N",
        help="run exact methods only on nets of at most N layers (default: 32)",
    )
    p.add_argument("--no-bound", action="store_true", help="skip planopt.lower_bound jobs")
    p.add_argument(
        "--draws",
        type=int,
        default=20,
        metavar="N",
        help="noisy profiles per plan in the robustness study; 0 skips it (default: 20)",
    )
    p.add_argument(
        "--noise",
        type=_noise,
        default=0.1,
        metavar="R",
        help="relative noise of the robustness study, e.g. 0.1 or 10%% (default: 0.1)",
    )
    p.add_argument(
        "--out", default="planopt-experiment", metavar="DIR", help="default: planopt-experiment"
    )
    _common(p)

    p = sub.add_parser(
        "suite",
        help="run the report's suite (experiments/REPORT.md)",
        description=(
            "Regenerate every table and figure of experiments/REPORT.md: "
            "OUT/results/sweep/* and OUT/figures/*. About 20 minutes on 2 cores; "
            "--large is the bigger sweep (hours)."
        ),
    )
    p.set_defaults(run=_cmd_suite)
    p.add_argument("--large", action="store_true", help="the larger sweep (hours)")
    p.add_argument("--out", default="experiments", metavar="DIR", help="default: experiments")
    _common(p)
