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
import textwrap
from typing import Any

from planopt.cli.args import load_profile_arg, positive_int
from planopt.cli.common import EXIT_OK, AddCommand, dump
from planopt.errors import PlanoptError


class ModelFactoryError(PlanoptError, ValueError):
    """`--model` does not name a factory that returns a chain, a batch and a loss."""


class DeviceError(PlanoptError, ValueError):
    """`--device` names no device torch knows or none this machine has."""


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
    if not callable(factory):
        raise ModelFactoryError(
            f"--model must name a callable factory, got {target!r} (a {type(factory).__name__})"
        )
    try:
        made = factory(**kwargs)
    except (TypeError, ValueError) as exc:
        # The factory refused its arguments (a missing or unknown keyword, a bad value):
        # the user's input, said in one line; any other exception is a bug and shows.
        raise ModelFactoryError(
            f"--model {target} with --model-args {args_text}: the factory refused its "
            f"arguments: {exc}"
        ) from None
    if isinstance(made, tuple) and len(made) == 3:
        return made
    if all(hasattr(made, a) for a in ("chain", "loss_fn", "batch")):
        return made.chain, made.batch(), made.loss_fn
    raise ModelFactoryError(
        f"--model {target}: the factory must return (chain, (inputs, targets), loss_fn) or "
        f"an object with chain, loss_fn and batch(), got {type(made).__name__}"
    )


def _check_device(text: str | None) -> None:
    """`--device` must name a device torch knows and this machine has (checked before the
    model is built, so a typo costs nothing)."""
    if text is None:
        return
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError) as exc:
        raise DeviceError(
            f"--device must be a torch device (cpu, cuda:0), got {text!r}: {exc}"
        ) from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (device.index or 0) >= count:
            raise DeviceError(
                f"--device must be a device this machine has ({count} CUDA device(s)), got {text!r}"
            )
    elif device.type != "cpu":
        backend = getattr(torch, device.type, None)
        available = getattr(backend, "is_available", None)
        if available is None or not available():
            raise DeviceError(f"--device must be a device this machine has, got {text!r}")


def run(args: argparse.Namespace) -> int:
    from planopt.io import load_plan

    profile = load_profile_arg(args.profile)
    plan = load_plan(args.plan)
    plan.check(profile)  # a plan made for another profile says so before the model is built
    _check_device(args.device)
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
