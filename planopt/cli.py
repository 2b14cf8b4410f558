"""The `planopt` command line: simulate, solve, show, methods, demo, experiment.

Every error a user can cause arrives here as a `PlanoptError` (or an
`OSError` writing `--output`) and leaves as one `planopt: error: ...` line
with exit code 2. Nothing else is caught: a bug still shows its traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from planopt import __version__, registry
from planopt.api import check_time_limit, solve
from planopt.budget import budget_from_fraction, keep_all_peak, min_budget, parse_budget
from planopt.bundled import bundled_profile, bundled_profile_names
from planopt.errors import FormatError, PlanoptError, SolverOptionError
from planopt.io import load_plan, load_profile, plan_to_dict, save_plan
from planopt.plan import SWAP, Plan
from planopt.profile import Profile
from planopt.report import (
    gib,
    human_bytes,
    human_seconds,
    key_values,
    percent,
    schedule_summary,
    table,
)
from planopt.result import Solution, Status
from planopt.schedule import Schedule
from planopt.simulate import check_budget, simulate

EXIT_OK = 0
EXIT_NO_FIT = 1
EXIT_BAD_INPUT = 2

DEMO_FRACTIONS = (0.7, 0.5, 0.3)
DEMO_SKIPPED = ("brute-force",)  # the test oracle: exponential, never a contender
DEMO_TIME_LIMIT = 5.0
DEMO_EXACT_MAX_LAYERS = 40

EXIT_CODES = """\
exit codes:
  0  success
  1  no plan that fits: solve ended infeasible or timeout (the reason is
     still printed), or simulate --budget found the plan's peak above it
  2  bad input: unreadable or malformed profile or plan, a plan made for
     another profile, a bad budget, method, option or time limit, or an
     --output file that cannot be written
"""


def _epilog() -> str:
    inputs = (
        "PROFILE is a path to a planopt.profile/1 JSON file or the name of a bundled "
        f"profile ({', '.join(bundled_profile_names())}). BUDGET is bytes (12884901888), "
        "a size (12GiB, 1.5GB) or a percentage of keep-all activation memory (50%)."
    )
    return textwrap.fill(inputs, 78) + "\n\n" + EXIT_CODES


class _UsageError(Exception):
    """argparse's complaint, turned into our one-line error instead of a usage dump."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(f"{message} (see '{self.prog} --help')")


# -- argument types and loaders ---------------------------------------------------


def _time_limit(text: str) -> float:
    """argparse type: the rule is `planopt.solve`'s, checked before any work starts."""
    try:
        value: object = float(text)
    except ValueError:
        value = text
    try:
        limit = check_time_limit(value)
    except SolverOptionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    assert limit is not None
    return limit


def load_profile_arg(arg: str) -> Profile:
    """A profile from a JSON file or, when no such file exists, a bundled name."""
    path = Path(arg)
    if path.is_file():
        return load_profile(path)
    names = bundled_profile_names()
    if arg in names:
        return bundled_profile(arg)
    if path.exists() or path.suffix or os.sep in arg:
        return load_profile(path)  # its error names the file and why it cannot be read
    raise FormatError(
        f"profile must be a JSON file or a bundled profile ({', '.join(names)}), "
        f"got {arg!r} (no such file)"
    )


def _budget_arg(text: str | None, profile: Profile) -> float | None:
    return None if text is None else check_budget(parse_budget(text, profile))


def _dump(data: dict) -> None:
    print(json.dumps(data, indent=1))


def _profile_line(profile: Profile) -> str:
    return f"{profile.name} ({len(profile.layers)} layers)"


def _budget_line(budget: float, minimum: int) -> str:
    return (
        f"{human_bytes(budget)} ({budget:.0f} B); every plan needs at least {human_bytes(minimum)}"
    )


# -- simulate ----------------------------------------------------------------------


def _cmd_simulate(args: argparse.Namespace) -> int:
    profile = load_profile_arg(args.profile)
    plan = load_plan(args.plan)
    budget = _budget_arg(args.budget, profile)
    schedule = simulate(profile, plan, budget)
    if args.json:
        _dump({"profile": profile.name, **schedule.to_dict()})
    else:
        head = [("profile", _profile_line(profile)), ("plan", args.plan)]
        print(key_values([*head, *schedule_summary(schedule, plan)]))
    if not schedule.feasible:
        _note(
            "does not fit",
            f"the plan peaks at {schedule.peak_bytes} bytes, above the budget {budget:.0f}",
        )
        return EXIT_NO_FIT
    return EXIT_OK


# -- solve -------------------------------------------------------------------------


def _solve_options(method: str, backend: str | None) -> dict:
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


def _check_output(path: str | None) -> None:
    """Refuse an unwritable --output before a long solve, not after it."""
    if path is None:
        return
    folder = Path(path).parent
    if not folder.is_dir():
        raise FormatError(f"--output folder must exist, got {str(folder)!r} for {path!r}")
    if Path(path).is_dir():
        raise FormatError(f"--output must be a file path, got the folder {path!r}")


def _fits(solution: Solution) -> bool:
    return (
        solution.status in (Status.OPTIMAL, Status.FEASIBLE)
        and solution.schedule is not None
        and solution.schedule.feasible
    )


def _cmd_solve(args: argparse.Namespace) -> int:
    profile = load_profile_arg(args.profile)
    budget = _budget_arg(args.budget, profile)
    options = _solve_options(args.method, args.backend)
    _check_output(args.output)
    solution = solve(
        profile, budget, args.method, time_limit=args.time_limit, seed=args.seed, **options
    )
    fits = _fits(solution)
    bound_only = solution.status is Status.BOUND
    written = None
    if fits and args.output is not None:
        try:
            save_plan(solution.plan, args.output)
        except OSError as exc:
            raise FormatError(
                f"--output must be a writable file, got {args.output!r} ({exc.strerror})"
            ) from None
        written = args.output
    if args.json:
        plan = None if solution.plan is None else plan_to_dict(solution.plan)
        _dump({"profile": profile.name, **solution.to_dict(), "plan": plan, "output": written})
    else:
        _print_solution(profile, solution, written)
    if not fits and not bound_only:
        _note(solution.status.value, solution.message or "no plan fits the budget")
        return EXIT_NO_FIT
    return EXIT_OK


def _print_solution(profile: Profile, solution: Solution, written: str | None) -> None:
    pairs = [
        ("profile", _profile_line(profile)),
        ("method", solution.method),
        ("budget", _budget_line(solution.budget, solution.min_budget)),
        ("status", solution.status.value),
        ("lower bound", human_seconds(solution.lower_bound)),
        ("gap", percent(solution.gap)),
        ("solve time", f"{solution.solve_seconds:.3f} s"),
    ]
    if solution.schedule is not None and solution.plan is not None:
        pairs += schedule_summary(solution.schedule, solution.plan)
    if solution.message:
        pairs.append(("message", solution.message))
    if written is not None:
        pairs.append(("plan written", written))
    print(key_values(pairs))


# -- show --------------------------------------------------------------------------


def _action_cell(plan: Plan, i: int) -> str:
    action = plan.actions[i]
    if action is not SWAP:
        return action.value
    wait = plan.swap_wait[i]
    extra = "" if wait is None else f", F{wait} waits"
    return f"swap (back at B{plan.prefetch_at[i]}{extra})"


def _cmd_show(args: argparse.Namespace) -> int:
    profile = load_profile_arg(args.profile)
    plan = load_plan(args.plan) if args.plan is not None else Plan.keep_all(profile)
    budget = _budget_arg(args.budget, profile)
    schedule = simulate(profile, plan, budget)
    dev = profile.device
    print(
        key_values(
            [
                ("profile", _profile_line(profile)),
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
            row.append(_action_cell(plan, i))
        rows.append(row)
    print()
    print(table(headers, rows, right=(0, 2, 3, 4)))
    print()
    label = args.plan if args.plan is not None else "keep-all (no plan given)"
    print(key_values([("plan", label), *schedule_summary(schedule, plan)]))
    if args.plot is not None:
        _plot(profile, plan, schedule, args.plot, f"{profile.name}: {label}")
    return EXIT_OK


def _plot(profile: Profile, plan: Plan, schedule: Schedule, path: str, title: str) -> None:
    from planopt.plot import save_figure, timeline_figure

    figure = timeline_figure(profile, plan, title=title, schedule=schedule)
    try:
        save_figure(figure, path)
    except OSError as exc:
        raise FormatError(
            f"--plot must be a writable file, got {path!r} ({exc.strerror})"
        ) from None
    print(f"\ntimeline written to {path}")


# -- methods -----------------------------------------------------------------------


def _options_cell(spec: registry.MethodSpec) -> str:
    if not spec.is_available():
        return "-"
    try:
        options = spec.options()
    except (ImportError, AttributeError) as exc:
        # A registration pointing at missing code must not hide the other methods.
        return f"cannot load {spec.target}: {exc}"
    return ", ".join(options) or "-"


def _cmd_methods(args: argparse.Namespace) -> int:
    rows = []
    for name in registry.names():
        spec = registry.get(name)
        missing = [m for m in spec.requires if importlib.util.find_spec(m) is None]
        rows.append(
            [
                spec.name,
                ", ".join(spec.aliases) or "-",
                f"no (needs {', '.join(missing)})" if missing else "yes",
                "yes" if spec.exact else "no",
                _options_cell(spec),
                spec.summary,
            ]
        )
    headers = ["method", "aliases", "available", "exact", "options", "summary"]
    print(table(headers, rows))
    print(
        "\nOptions are keyword arguments of planopt.solve(); on the command line every "
        "method takes --time-limit and --seed, and those with a backend option --backend."
    )
    return EXIT_OK


# -- demo --------------------------------------------------------------------------


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


def _cmd_demo(args: argparse.Namespace) -> int:
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
        _dump(
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


# -- parser and entry point ----------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    epilog = _epilog()
    parser = _Parser(
        prog="planopt",
        description=(
            "Plan keep/swap/recompute of saved activations for GPU training under a "
            "memory budget, and simulate plans with the planopt cost model."
        ),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"planopt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_: str, run: Callable[[argparse.Namespace], int]):
        p = sub.add_parser(
            name,
            help=help_,
            description=help_,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(run=run)
        return p

    p = command(
        "simulate", "simulate a plan on a profile and report time and memory", _cmd_simulate
    )
    p.add_argument("profile", metavar="PROFILE", help="profile JSON file or bundled name")
    p.add_argument("plan", metavar="PLAN", help="plan JSON file (planopt.plan/1)")
    p.add_argument("--budget", metavar="B", help="check the peak against this budget")
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = command("solve", "find a plan that fits a memory budget", _cmd_solve)
    p.add_argument("profile", metavar="PROFILE", help="profile JSON file or bundled name")
    p.add_argument("--budget", metavar="B", required=True, help="memory budget (see below)")
    p.add_argument("--method", default="greedy", help="see `planopt methods` (default: greedy)")
    p.add_argument("--backend", metavar="NAME", help="back-end for methods with that option")
    p.add_argument(
        "--time-limit", metavar="S", type=_time_limit, help="seconds (default: no limit)"
    )
    p.add_argument("--seed", metavar="N", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--output", metavar="PLAN", help="write the plan here when it fits")
    p.add_argument("--json", action="store_true", help="print one JSON object")

    p = command("show", "print a profile's layers and a plan's timeline summary", _cmd_show)
    p.add_argument("profile", metavar="PROFILE", help="profile JSON file or bundled name")
    p.add_argument("plan", metavar="PLAN", nargs="?", help="plan JSON file (default: keep-all)")
    p.add_argument("--budget", metavar="B", help="compare the peak with this budget")
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="also draw the plan's timeline (compute, D2H, H2D lanes over the memory "
        "curve) to FILE (.png, .svg or .pdf; needs matplotlib)",
    )

    command("methods", "list the registered methods, their availability and options", _cmd_methods)

    p = command(
        "demo",
        "compare every available method on the bundled nets at budgets of 70, 50 and 30 "
        "percent of keep-all activation memory",
        _cmd_demo,
    )
    p.add_argument(
        "--time-limit",
        metavar="S",
        type=_time_limit,
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

    from planopt.experiment.cli import add_experiment_command
    from planopt.run_check_cli import add_run_check_command

    add_experiment_command(command)
    add_run_check_command(command)
    return parser


def _fail(message: str) -> int:
    print(f"planopt: error: {' '.join(message.splitlines())}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _note(status: str, message: str) -> None:
    print(f"planopt: {status}: {' '.join(message.splitlines())}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (see the epilog)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        return _fail(str(exc))
    except SystemExit as exc:  # --help and --version exit 0 through argparse
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    try:
        return args.run(args)
    except PlanoptError as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        print("planopt: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`planopt demo | head`): stop quietly, as a
        # process killed by SIGPIPE would, and keep Python's flush at exit quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
