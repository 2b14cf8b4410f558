"""`planopt run-check PROFILE PLAN --model module:factory`: the model against PyTorch.

Runs training steps of your model under the plan (`planopt.runtime.check`)
and prints predicted against measured peak memory and time per phase.
`--model` names a factory, `module:attr`, called with `--model-args` (a
JSON object of keyword arguments) that returns either an object with
`chain`, `loss_fn` and `batch()` (a `planopt.runtime.ReferenceModel`, as
`planopt.runtime.models:reference_model` or `planopt.runtime.hf:hf_model`
return) or a tuple `(chain, (inputs, targets), loss_fn)`
(`planopt.cli.factory`, shared with `planopt profile-model module:factory`).
torch is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import textwrap

from planopt.cli.args import load_profile_arg, positive_int
from planopt.cli.common import EXIT_OK, AddCommand, dump
from planopt.cli.factory import check_device, load_model

MODEL_HELP = (
    "--model names a factory as MODULE:ATTR (importable here), called with --model-args "
    "(a JSON object of keyword arguments). It returns (chain, (inputs, targets), loss_fn) "
    "or an object with chain, loss_fn and batch() (a planopt.runtime.ReferenceModel). "
    "PROFILE must be the planopt.profile/2 measured on that model with that batch, dtype "
    "and device (planopt.runtime.profile, or profile-model): the run checks every layer's "
    "products against it."
)
EXAMPLE = (
    "  planopt run-check gpt.profile.json gpt.plan.json \\\n"
    "    --model planopt.runtime.models:reference_model \\\n"
    '    --model-args \'{"name": "gpt", "size": "tiny"}\''
)


def register(command: AddCommand) -> None:
    p = command(
        "run-check",
        "run training steps of your model under a plan (--iterations, 3 by default; needs "
        "torch) and print predicted against measured peak memory and time per phase",
        run,
    )
    model_help = textwrap.fill(MODEL_HELP, 78, break_on_hyphens=False)
    p.epilog = f"{model_help}\n\nfor example:\n{EXAMPLE}\n\n{p.epilog}"
    p.add_argument("profile", metavar="PROFILE", help="the plan's profile (planopt.profile/2)")
    p.add_argument("plan", metavar="PLAN", help="plan JSON file (planopt.plan/1)")
    p.add_argument(
        "--model",
        metavar="MODULE:FACTORY",
        required=True,
        help="factory of the model the profile was measured on (see --model below)",
    )
    p.add_argument(
        "--model-args",
        metavar="JSON",
        default="{}",
        help='keyword arguments of the factory, e.g. \'{"name": "gpt", "size": "tiny"}\'',
    )
    p.add_argument("--device", help="where to run (default: where the chain's parameters are)")
    p.add_argument(
        "--iterations", type=positive_int, default=3, metavar="N", help="timed steps (default: 3)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from planopt.io import load_plan

    profile = load_profile_arg(args.profile)
    plan = load_plan(args.plan)
    plan.check(profile)  # a plan made for another profile says so before the model is built
    check_device(args.device)
    chain, batch, loss_fn = load_model(args.model, args.model_args)

    from planopt.runtime.check import check, format_check

    report = check(
        chain, plan, batch, loss_fn, profile=profile, device=args.device, iterations=args.iterations
    )
    if args.json:
        from dataclasses import asdict

        dump({**asdict(report), "peak_error": report.peak_error})
    else:
        print(format_check(report))
    return EXIT_OK
