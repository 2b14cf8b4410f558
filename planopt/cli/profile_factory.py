"""`planopt profile-model module:factory -o out.json`: your own model's `/2` profile.

The model, its batch and its loss come from the factory, as `planopt
run-check --model` takes them (`planopt.cli.factory`). By default the model
is measured where it runs (`planopt.runtime.profile`: real training steps on
`--device`), so `planopt run-check` on the same factory then compares a
plan's prediction with what PyTorch holds. With `--gpu NAME` it is traced
for that GPU instead (`planopt.runtime.trace_profile`: fake tensors, times
by roofline), as named models are.

The host link of a measured profile: measured with pinned copies on CUDA;
on CPU `--link instant` (the default: copies end when they start, as the CPU
executor's synchronous copies do, which is the link under which `run-check`'s
peaks compare) or `--link GPU`, that GPU's host link
(`planopt.hardware`). torch is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

from planopt.cli.args import check_output_path, positive_int
from planopt.cli.common import EXIT_OK
from planopt.cli.factory import check_device, load_model
from planopt.errors import PlanoptError
from planopt.profile import Device
from planopt.report import human_bytes

INSTANT = "instant"
# Options only a factory's model takes: (option, its argparse dest).
FACTORY_ONLY = (
    ("--model-args", "model_args"),
    ("--device", "device"),
    ("--link", "link"),
    ("--iterations", "iterations"),
    ("--warmup", "warmup"),
)
_MEASURED_ONLY = FACTORY_ONLY[1:]


class ProfileFactoryError(PlanoptError, ValueError):
    """An option `profile-model module:factory` cannot honour, or the profiling failed."""


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def add_factory_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `profile-model module:factory` (refused for a named model)."""
    p.add_argument(
        "--model-args",
        metavar="JSON",
        help="a factory's keyword arguments, a JSON object (default: {})",
    )
    p.add_argument(
        "--device",
        help="a factory's model: where to measure it (default: where its parameters are)",
    )
    p.add_argument(
        "--link",
        metavar="LINK",
        help="a factory's model measured on CPU: 'instant' (default) or a GPU name, whose host "
        "link the plans will use (on CUDA the link is measured unless given)",
    )
    p.add_argument(
        "--iterations",
        type=positive_int,
        metavar="N",
        help="a factory's model: timed steps (default: 10)",
    )
    p.add_argument(
        "--warmup",
        type=_non_negative_int,
        metavar="N",
        help="a factory's model: warm-up steps (default: 3)",
    )


def _link(text: str | None) -> Device | None:
    from planopt.hardware import gpu

    if text is None:
        return None
    if text == INSTANT:
        return Device("instant (copies end when they start)", math.inf, math.inf, 0.0)
    try:
        return gpu(text).device()
    except PlanoptError as exc:
        raise ProfileFactoryError(f"--link must be '{INSTANT}' or a GPU name: {exc}") from None


def run_factory(args: argparse.Namespace, names: tuple[str, ...]) -> int:
    """`profile-model module:factory` (module doc); `names`: the named models, for messages."""
    from planopt.hardware import gpu

    for option, dest in (("--batch", "batch"), ("--seq", "seq")):
        if getattr(args, dest) is not None:
            raise ProfileFactoryError(
                f"{option} applies to named models only (a factory makes its own batch), "
                f"got {option} for {args.model}"
            )
    record = None if args.gpu is None else gpu(args.gpu)
    if record is not None:
        for option, dest in _MEASURED_ONLY:
            if getattr(args, dest) is not None:
                raise ProfileFactoryError(
                    f"{option} applies to a measured profile, not a traced one (--gpu "
                    f"{args.gpu}), got {option}"
                )
    check_output_path(args.output, "--output")
    check_device(args.device)
    link = _link(args.link)
    started = time.perf_counter()
    chain, batch, loss_fn = load_model(args.model, args.model_args or "{}", "model", names)

    import torch

    dtype = args.dtype or "fp32"
    autocast = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[dtype]
    factory = args.model.rpartition(":")[2]
    try:
        if record is not None:
            prof = _traced(args, chain, batch, loss_fn, record, autocast, factory, dtype)
            where = f"estimated step {{}} ms on {record.name}"
        else:
            prof, device = _measured(args, chain, batch, loss_fn, link, autocast, factory, dtype)
            where = f"measured step {{}} ms on {device}"
    except (TypeError, ValueError, RuntimeError) as exc:
        if isinstance(exc, PlanoptError):
            raise
        raise ProfileFactoryError(
            f"model {args.model}: profiling raised {type(exc).__name__}: {exc} (run "
            "planopt.runtime.profile on it in Python for the traceback)"
        ) from None

    from planopt.io import save_profile

    save_profile(prof, args.output)
    activations = sum(layer.out_bytes + layer.saved_bytes for layer in prof.layers)
    step = sum(layer.fwd + layer.bwd for layer in prof.layers)
    print(
        f"{args.output}: {prof.name}, {len(prof.layers)} layers, static "
        f"{human_bytes(prof.static_bytes)}, activations {human_bytes(activations)}, "
        + where.format(f"{step * 1e3:.1f}")
        + f" (in {time.perf_counter() - started:.1f} s)",
        file=sys.stdout,
    )
    return EXIT_OK


def _traced(args, chain, batch, loss_fn, record, autocast, factory: str, dtype: str):
    from planopt.runtime.fake import trace_profile

    return trace_profile(
        chain,
        batch,
        loss_fn,
        gpu=record,
        autocast=autocast,
        grads_to_none=args.grads_to_none,
        name=args.name or f"{factory}-{record.name}-{dtype}-traced",
        menus=not args.no_menus,
        menu_size=args.menu_size,
        signed_scratch=not args.clamped_scratch,
    )


def _measured(args, chain, batch, loss_fn, link, autocast, factory: str, dtype: str):
    import torch

    from planopt.runtime.profiler import profile

    if args.device is not None:
        device = torch.device(args.device)
        chain.to(device)
    else:
        device = next((p.device for p in chain.parameters()), batch[0].device)
    if link is None and device.type != "cuda":
        link = _link(INSTANT)
    prof = profile(
        chain,
        batch,
        loss_fn,
        device=device,
        iterations=10 if args.iterations is None else args.iterations,
        warmup=3 if args.warmup is None else args.warmup,
        link=link,
        grads_to_none=args.grads_to_none,
        autocast=autocast,
        name=args.name or f"{factory}-{device.type}-{dtype}-measured",
        menus=not args.no_menus,
        menu_size=args.menu_size,
        signed_scratch=not args.clamped_scratch,
    )
    return prof, device
