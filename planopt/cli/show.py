"""`planopt show PROFILE [PLAN]`: the profile's layers, a plan's actions, its timeline."""

from __future__ import annotations

import argparse

from planopt.budget import keep_all_peak, min_budget
from planopt.cli.args import budget_arg, check_output_path, load_profile_arg
from planopt.cli.common import EXIT_OK, AddCommand, profile_line
from planopt.io import load_plan
from planopt.plan import SWAP, Plan
from planopt.profile import Profile
from planopt.report import human_bytes, human_seconds, key_values, schedule_summary, table
from planopt.schedule import Schedule
from planopt.simulate import simulate


def register(command: AddCommand) -> None:
    p = command("show", "print a profile's layers and a plan's timeline summary", run)
    p.add_argument("profile", metavar="PROFILE", help="profile JSON file or bundled name")
    p.add_argument("plan", metavar="PLAN", nargs="?", help="plan JSON file (default: keep-all)")
    p.add_argument("--budget", metavar="B", help="compare the peak with this budget")
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="also draw the plan's timeline (compute, D2H, H2D lanes over the memory "
        "curve) to FILE (.png, .svg or .pdf; needs matplotlib)",
    )


def action_cell(plan: Plan, i: int) -> str:
    action = plan.actions[i]
    option = plan.options[i] if plan.options else None
    named = "" if option is None else f" [{option}]"  # a partial layer (cost model v3)
    if action is not SWAP:
        return action.value + named
    wait = plan.swap_wait[i]
    extra = "" if wait is None else f", F{wait} waits"
    return f"swap{named} (back at B{plan.prefetch_at[i]}{extra})"


def run(args: argparse.Namespace) -> int:
    profile = load_profile_arg(args.profile)
    plan = load_plan(args.plan) if args.plan is not None else Plan.keep_all(profile)
    budget = budget_arg(args.budget, profile)
    check_output_path(args.plot, "--plot")
    schedule = simulate(profile, plan, budget)
    dev = profile.device
    print(
        key_values(
            [
                ("profile", profile_line(profile)),
                ("source", profile.source or "-"),
                (
                    "device",
                    f"{dev.name}: H2D {dev.h2d_bandwidth / 1e9:.1f} GB/s, "
                    f"D2H {dev.d2h_bandwidth / 1e9:.1f} GB/s, "
                    f"latency {human_seconds(dev.transfer_latency)}",
                ),
                ("static", human_bytes(profile.static_bytes)),
                ("keep-all peak", human_bytes(keep_all_peak(profile))),
                ("min budget", human_bytes(min_budget(profile))),
            ]
        )
    )
    headers = ["#", "name", "fwd", "bwd", "saved"]
    if args.plan is not None:
        headers.append("action")
    rows = []
    for i, layer in enumerate(profile.layers):
        row = [
            i,
            layer.name,
            human_seconds(layer.fwd),
            human_seconds(layer.bwd),
            human_bytes(layer.product_bytes),
        ]
        if args.plan is not None:
            row.append(action_cell(plan, i))
        rows.append(row)
    print()
    print(table(headers, rows, right=(0, 2, 3, 4)))
    print()
    label = args.plan if args.plan is not None else "keep-all (no plan given)"
    print(key_values([("plan", label), *schedule_summary(schedule, plan)]))
    if args.plot is not None:
        plot(profile, plan, schedule, args.plot, f"{profile.name}: {label}")
    return EXIT_OK


def plot(profile: Profile, plan: Plan, schedule: Schedule, path: str, title: str) -> None:
    from planopt.plot import save_figure, timeline_figure

    figure = timeline_figure(profile, plan, title=title, schedule=schedule)
    save_figure(figure, path, what="--plot")
    print(f"\ntimeline written to {path}")
