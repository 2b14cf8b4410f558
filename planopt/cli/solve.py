"""`planopt solve PROFILE --budget B`: one method's plan, its figures, and `--output`."""

from __future__ import annotations

import argparse

from planopt import registry
from planopt.api import solve
from planopt.cli.args import (
    WORK_UNIT_HELP,
    budget_arg,
    check_output_path,
    load_profile_arg,
    seed,
    time_limit,
    whole_bytes,
    work_limit,
)
from planopt.cli.common import (
    EXIT_NO_FIT,
    EXIT_OK,
    AddCommand,
    budget_line,
    dump,
    note,
    profile_line,
)
from planopt.errors import SolverOptionError
from planopt.io import plan_to_dict, save_plan
from planopt.option_types import parse_options
from planopt.profile import Profile
from planopt.report import human_seconds, key_values, percent, schedule_summary
from planopt.result import Solution, Status


def register(command: AddCommand) -> None:
    p = command("solve", "find a plan that fits a memory budget", run)
    p.add_argument("profile", metavar="PROFILE", help="profile JSON file or bundled name")
    p.add_argument("--budget", metavar="B", required=True, help="memory budget (see below)")
    p.add_argument("--method", default="greedy", help="see `planopt methods` (default: greedy)")
    p.add_argument("--backend", metavar="NAME", help="back-end for methods with that option")
    p.add_argument(
        "--option",
        metavar="NAME=VALUE",
        action="append",
        help="a method option (see `planopt methods`), e.g. --option max_layers=300; "
        "repeatable; true/false for switches, none for no value, a plan file for warm_start",
    )
    p.add_argument("--time-limit", metavar="S", type=time_limit, help="seconds (default: no limit)")
    p.add_argument(
        "--work-limit",
        metavar="N",
        type=work_limit,
        help=f"stop the search after N {WORK_UNIT_HELP} (default: no limit)",
    )
    p.add_argument("--seed", metavar="N", type=seed, default=0, help="random seed (default: 0)")
    p.add_argument("--output", metavar="PLAN", help="write the plan here when it fits")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def solve_options(method: str, backend: str | None, texts: list[str] | None = None) -> dict:
    """The method's options from `--option NAME=VALUE` (read as the method's signature
    annotates them) and `--backend` (only for methods that declare a `backend` option)."""
    spec = registry.get(method)
    allowed = spec.options()
    options = parse_options(spec.name, spec.load(), allowed, texts or [])
    if backend is None:
        return options
    if "backend" not in allowed:
        raise SolverOptionError(
            f"--backend is only for methods with a backend option (see `planopt methods`); "
            f"method {spec.name!r} has none, got --backend {backend!r}"
        )
    if "backend" in options:
        raise SolverOptionError(
            f"--backend and --option backend=... must not both be given, got --backend "
            f"{backend!r} and --option backend={options['backend']!r}"
        )
    return {**options, "backend": backend}


def fits(solution: Solution) -> bool:
    return (
        solution.status in (Status.OPTIMAL, Status.FEASIBLE)
        and solution.schedule is not None
        and solution.schedule.feasible
    )


def run(args: argparse.Namespace) -> int:
    profile = load_profile_arg(args.profile)
    budget = budget_arg(args.budget, profile)
    options = solve_options(args.method, args.backend, args.option)
    check_output_path(args.output, "--output")  # before a long solve, not after it
    solution = solve(
        profile,
        budget,
        args.method,
        time_limit=args.time_limit,
        work_limit=args.work_limit,
        seed=args.seed,
        **options,
    )
    fit = fits(solution)
    bound_only = solution.status is Status.BOUND
    written = None
    if fit and args.output is not None:
        save_plan(solution.plan, args.output)  # planopt.paths' rule; its errors name the path
        written = args.output
    if args.json:
        plan = None if solution.plan is None else plan_to_dict(solution.plan)
        data = solution.to_dict()
        data["budget"] = whole_bytes(solution.budget)
        dump({"profile": profile.name, **data, "plan": plan, "output": written})
    else:
        print_solution(profile, solution, written)
    if not fit and not bound_only:
        note(solution.status.value, solution.message or "no plan fits the budget")
        return EXIT_NO_FIT
    return EXIT_OK


def work_line(used: float | None, limit: float | None) -> str:
    """`0.123 work units (limit 1)`: what the solve spent, against its limit."""
    if used is None:
        return "-"
    return f"{used:.3f} work units" + ("" if limit is None else f" (limit {limit:g})")


def provenance_line(solution: Solution) -> str:
    """Where the lower bound came from (`planopt.certificate`), or `-`."""
    cert = solution.bound_provenance
    return "-" if cert is None else cert.summary()


def print_solution(profile: Profile, solution: Solution, written: str | None) -> None:
    pairs = [
        ("profile", profile_line(profile)),
        ("method", solution.method),
        (
            "budget",
            budget_line(
                solution.budget,
                solution.min_budget,
                solution.min_budget_exact,
                solution.min_budget_upper,
            ),
        ),
        ("status", solution.status.value),
        ("lower bound", human_seconds(solution.lower_bound)),
        ("gap", percent(solution.gap)),
        ("bound from", provenance_line(solution)),
        ("solve time", f"{solution.solve_seconds:.3f} s"),
        ("work", work_line(solution.work_used, solution.work_limit)),
    ]
    if solution.schedule is not None and solution.plan is not None:
        pairs += schedule_summary(solution.schedule, solution.plan)
    if solution.message:
        pairs.append(("message", solution.message))
    if written is not None:
        pairs.append(("plan written", written))
    print(key_values(pairs))
