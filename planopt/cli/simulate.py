"""`planopt simulate PROFILE PLAN`: the cost model's figures for one plan."""

from __future__ import annotations

import argparse

from planopt.cli.args import budget_arg, load_profile_arg
from planopt.cli.common import EXIT_NO_FIT, EXIT_OK, AddCommand, dump, note, profile_line
from planopt.io import load_plan
from planopt.report import key_values, schedule_summary
from planopt.simulate import simulate


def register(command: AddCommand) -> None:
    p = command("simulate", "simulate a plan on a profile and report time and memory", run)
    p.add_argument("profile", metavar="PROFILE", help="profile JSON file or bundled name")
    p.add_argument("plan", metavar="PLAN", help="plan JSON file (planopt.plan/1)")
    p.add_argument("--budget", metavar="B", help="check the peak against this budget")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    profile = load_profile_arg(args.profile)
    plan = load_plan(args.plan)
    budget = budget_arg(args.budget, profile)
    schedule = simulate(profile, plan, budget)
    if args.json:
        data = schedule.to_dict()
        if budget is not None:
            data["budget"] = budget  # whole bytes (see `args.budget_arg`)
        dump({"profile": profile.name, **data})
    else:
        head = [("profile", profile_line(profile)), ("plan", args.plan)]
        print(key_values([*head, *schedule_summary(schedule, plan)]))
    if not schedule.feasible:
        note(
            "does not fit",
            f"the plan peaks at {schedule.peak_bytes} bytes, above the budget {budget:.0f}",
        )
        return EXIT_NO_FIT
    return EXIT_OK
