"""`planopt run-check PROFILE PLAN --model module:factory`: the model against PyTorch.

Runs training steps of your model under the plan (`planopt.runtime.check`)
and prints predicted against measured peak memory and time per phase.
`--model` names a factory, `module:attr`, called with `--model-args` (a
JSON object of keyword arguments) that returns either an object with
`chain`, `loss_fn` and `batch()` (a `planopt.runtime.ReferenceModel`, as
`planopt.runtime.models:reference_model` or `planopt.runtime.hf:hf_model`
return) or a tuple `(chain, (inputs, targets), loss_fn)`. torch is
imported only when the command runs.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from planopt.cli.args import load_profile_arg
from planopt.cli.common import EXIT_OK, AddCommand, dump
from planopt.errors import PlanoptError


class ModelFactoryError(PlanoptError, ValueError):
    """`--model` does not name a factory that returns a chain, a batch and a loss."""


def register(command: AddCommand) -> None:
    p = command(
        "run-check",
        "run one step of your model under a plan (needs torch) and print predicted "
        "against measured peak memory and time per phase",
        run,
    )
    p.add_argument("profile", metavar="PROFILE", help="the plan's profile (planopt.profile/2)")
    p.add_argument("plan", metavar="PLAN", help="plan JSON file (planopt.plan/1)")
    p.add_argument(
        "--model",
        metavar="MODULE:FACTORY",
        required=True,
        help="factory of the model the profile was measured on (see below)",
    )
    p.add_argument(
        "--model-args",
        metavar="JSON",
        default="{}",
        help='keyword arguments of the factory, e.g. \'{"name": "gpt", "size": "tiny"}\'',
    )
    p.add_argument("--device", help="where to run (default: where the chain's parameters are)")
    p.add_argument("--iterations", type=int, default=3, help="timed steps (default: 3)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _model(target: str, args_text: str) -> tuple[Any, Any, Any]:
    from planopt import registry

    try:
        kwargs = json.loads(args_text)
    except json.JSONDecodeError as exc:
        raise ModelFactoryError(
            f"--model-args must be a JSON object, got {args_text!r}: {exc}"
        ) from None
    if not isinstance(kwargs, dict):
        raise ModelFactoryError(f"--model-args must be a JSON object, got {args_text!r}")
    try:
        factory = registry.load_target(target)
    except (ValueError, ImportError, AttributeError) as exc:
        raise ModelFactoryError(
            f"--model must name a factory as module:attr, got {target!r}: {exc}"
        ) from None
    made = factory(**kwargs)
    if isinstance(made, tuple) and len(made) == 3:
        return made
    if all(hasattr(made, a) for a in ("chain", "loss_fn", "batch")):
        return made.chain, made.batch(), made.loss_fn
    raise ModelFactoryError(
        f"--model {target}: the factory must return (chain, (inputs, targets), loss_fn) or "
        f"an object with chain, loss_fn and batch(), got {type(made).__name__}"
    )


def run(args: argparse.Namespace) -> int:
    from planopt.io import load_plan

    profile = load_profile_arg(args.profile)
    plan = load_plan(args.plan)
    chain, batch, loss_fn = _model(args.model, args.model_args)

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
