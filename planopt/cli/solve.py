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
from planopt.errors import FormatError, SolverOptionError
from planopt.io import plan_to_dict, save_plan
from planopt.profile import Profile
from planopt.report import human_seconds, key_values, percent, schedule_summary
from planopt.result import Solution, Status


def register(command: AddCommand) -> None:
    p = command("solve", "find a plan that fits a memory budget", run)
    p.add_argument("profile", metavar="PROFILE", help="profile JSON file or bundled name")
    p.add_argument("--budget", metavar="B", required=True, help="memory budget (see below)")
    p.add_argument("--method", default="greedy", help="see `planopt methods` (default: greedy)")
    p.add_argument("--backend", metavar="NAME", help="back-end for methods with that option")
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


def solve_options(method: str, backend: str | None) -> dict:
    """`--backend` goes only to methods that declare a `backend` option."""
    if backend is None:
        return {}
    spec = registry.get(method)
    if "backend" not in spec.options():
        raise SolverOptionError(
            f"--backend is only for methods with a backend option (see `planopt methods`); "
            f"method {spec.name!r} has none, got --backend {backend!r}"
        )
    return {"backend": backend}


def fits(solution: Solution) -> bool:
    return (
        solution.status in (Status.OPTIMAL, Status.FEASIBLE)
        and solution.schedule is not None
        and solution.schedule.feasible
    )


def run(args: argparse.Namespace) -> int:
    profile = load_profile_arg(args.profile)
    budget = budget_arg(args.budget, profile)
    options = solve_options(args.method, args.backend)
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
        try:
            save_plan(solution.plan, args.output)
        except OSError as exc:
            raise FormatError(
                f"--output must be a writable file, got {args.output!r} ({exc.strerror})"
            ) from None
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
        ("budget", budget_line(solution.budget, solution.min_budget)),
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
