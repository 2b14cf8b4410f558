"""`planopt profile-model NAME --batch N --gpu GPU --dtype bf16 -o out.json`: a real
model's `/3` profile (each block with its menu of SAC options) without a GPU;
`planopt profile-model module:factory -o out.json`: your own model's, measured
(`planopt.cli.profile_factory`).

A named model is built from its published configuration under torch's
`FakeTensorMode` (no weights, no data) and one training step is traced
(`planopt.runtime.fake.trace_profile`): memory exactly as the runtime
profiler counts it, times by roofline on the named GPU (estimates, and the
profile's source says so). Each layer class's menu (cost model v3) is traced
operator by operator under the same fake mode (`planopt.runtime.menus`);
a backward that frees first gets a negative scratch (v3, 12.6). `--no-menus
--clamped-scratch` writes the whole-layer `/2` profile. torch is imported
only when the command runs.
"""

from __future__ import annotations

import argparse
import sys
import time

from planopt.cli.args import check_output_path, positive_int
from planopt.cli.common import EXIT_OK, AddCommand
from planopt.cli.profile_factory import FACTORY_ONLY, add_factory_arguments, run_factory
from planopt.errors import PlanoptError
from planopt.hardware import GPUS
from planopt.report import human_bytes

# Kept here (not imported from planopt.runtime.catalogue) so `--help` needs no torch;
# a test checks the two lists agree.
MODEL_NAMES = (
    "torchvision:resnet50",
    "torchvision:vgg16",
    "hf:gpt2",
    "hf:gpt2-medium",
    "hf:llama-1b",
    "hf:bert-base",
)
DTYPES = ("bf16", "fp16", "fp32")


class ProfileModelError(PlanoptError, ValueError):
    """An option `profile-model` cannot honour for this model."""


def register(command: AddCommand) -> None:
    gpus = ", ".join(n for g in GPUS.values() for n in (g.name, *g.aliases))
    p = command(
        "profile-model",
        "write the planopt.profile/3 of a real model at a real batch size for a named GPU, "
        "without a GPU (memory traced exactly with fake tensors, times estimated by roofline; "
        "each block with its menu of selective-checkpointing options)",
        run,
    )
    p.add_argument(
        "model",
        metavar="NAME",
        help=f"one of: {', '.join(MODEL_NAMES)}; or your own model as MODULE:FACTORY, "
        "the factory run-check --model takes",
    )
    p.add_argument(
        "--batch",
        type=positive_int,
        help="samples per step, named models only (default: the model's usual one)",
    )
    p.add_argument(
        "--seq", type=positive_int, help="tokens per sample, hf: models only (default: theirs)"
    )
    p.add_argument(
        "--gpu",
        help=f"one of: {gpus} (default: h100-pcie for a named model; a factory's model is "
        "measured on --device unless --gpu is given, then traced for that GPU)",
    )
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        help="bf16/fp16: autocast mixed precision; fp32: none "
        "(default: bf16 for a named model, fp32 for a factory's)",
    )
    add_factory_arguments(p)
    p.add_argument(
        "--grads-to-none",
        action="store_true",
        help="parameter gradients set to None between steps (zero_grad's default)",
    )
    p.add_argument(
        "--no-menus",
        action="store_true",
        help="whole layers only, without the blocks' menus (with --clamped-scratch: a "
        "planopt.profile/2)",
    )
    p.add_argument(
        "--clamped-scratch",
        action="store_true",
        help="a backward's scratch clamped at 0 (cost model v2), not signed (v3, the default: "
        "minus what the backward frees first)",
    )
    p.add_argument(
        "--menu-size",
        type=positive_int,
        default=8,
        metavar="N",
        help="at most N options per layer, spread along its exact front (default: 8)",
    )
    p.add_argument("--name", help="the profile's name (default: from model, batch, GPU, dtype)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="profile JSON to write")


def run(args: argparse.Namespace) -> int:
    if args.model not in MODEL_NAMES and ":" in args.model:
        return run_factory(args, MODEL_NAMES)
    from planopt.hardware import gpu

    record = gpu(args.gpu or "h100-pcie")
    if args.model not in MODEL_NAMES:
        raise ProfileModelError(
            f"model must be one of {', '.join(MODEL_NAMES)} or a factory as module:attr, "
            f"got {args.model!r}"
        )
    for option, dest in FACTORY_ONLY:
        if getattr(args, dest) is not None:
            raise ProfileModelError(
                f"{option} applies to a factory's model (module:factory) only, "
                f"got {option} for {args.model}"
            )
    if args.seq is not None and not args.model.startswith("hf:"):
        raise ProfileModelError(
            f"--seq applies to hf: models only, got --seq {args.seq} for {args.model}"
        )
    check_output_path(args.output, "--output")
    started = time.perf_counter()

    import torch

    from planopt.io import save_profile
    from planopt.runtime.catalogue import build_fake, catalogue_model
    from planopt.runtime.fake import trace_profile

    model = catalogue_model(args.model)
    batch = args.batch or model.batch
    dtype = args.dtype or "bf16"
    autocast = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[dtype]
    seq = "" if model.seq is None else f"-s{args.seq or model.seq}"
    name = args.name or (
        f"{args.model.split(':', 1)[1]}-b{batch}{seq}-{record.name}-{dtype}-traced"
    )
    built = build_fake(args.model, batch, args.seq)
    profile = trace_profile(
        built.chain,
        built.batch,
        built.loss_fn,
        gpu=record,
        autocast=autocast,
        grads_to_none=args.grads_to_none,
        name=name,
        menus=not args.no_menus,
        menu_size=args.menu_size,
        signed_scratch=not args.clamped_scratch,
    )
    save_profile(profile, args.output)
    activations = sum(layer.out_bytes + layer.saved_bytes for layer in profile.layers)
    step = sum(layer.fwd + layer.bwd for layer in profile.layers)
    print(
        f"{args.output}: {name}, {len(profile.layers)} layers, static "
        f"{human_bytes(profile.static_bytes)}, activations {human_bytes(activations)}, "
        f"estimated step {step * 1e3:.1f} ms on {record.name} "
        f"(traced in {time.perf_counter() - started:.1f} s)",
        file=sys.stdout,
    )
    return EXIT_OK
