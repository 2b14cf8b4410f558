"""The methods users run today, applied to an unmodified model (the benchmark's baselines).

Each function takes a fresh `Bench` (same seed, same weights, same batch)
and returns a `Method`: the callable the step runs (the model, or its
compiled version), a note, and, for planopt, the handle. Nothing here is
tuned to the benchmark models; every baseline is called as its own
documentation shows.

- `hf_checkpointing`: `transformers`' `activation_checkpointing_enable`
  (every_n_layers, offload), or for a non-HF model (the ResNet) the same
  thing by hand: `torch.utils.checkpoint` around every n-th block.
- `op_sac`: torchtitan's selective op AC: every block under
  `torch.utils.checkpoint` with `create_selective_checkpoint_contexts`,
  saving matmul (`aten.mm/addmm/bmm`) and attention outputs, recomputing
  the rest (and on the ResNet, whose matmuls are convolutions,
  `aten.convolution` too).
- `compiled`: `torch.compile` with `activation_memory_budget`.
- `save_on_cpu`: `torch.autograd.graph.save_on_cpu` as torch ships it, and
  an emulated-link variant (`SaveOnLink`) with torch's pack/unpack logic
  whose host copies are filed as host memory and whose copies cost the
  link's time on the compute thread, as torch's copies on the compute
  stream would on a GPU.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from experiments.vs_torch_models import Bench
from planopt.profile import Device
from planopt.runtime.modelblocks import find_model_blocks
from planopt.runtime.tracker import host_memory

aten = torch.ops.aten
SAC_SAVE = {
    aten.mm.default,
    aten.addmm.default,
    aten.bmm.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_cudnn_attention.default,
}
SAC_SAVE_CONV = {aten.convolution.default}


@dataclass
class Method:
    """A method applied: what a step calls, how its peak is read, its extra link time."""

    name: str
    family: str  # "plain", "planopt", "hf", "sac", "compile", "save_on_cpu"
    call: Any  # the module a step calls
    note: str = ""
    handle: Any = None  # planopt's PlanHandle
    predicted: int | None = None
    budget_bytes: int | None = None
    compiled: bool = False
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    link_seconds: Callable[[], float] | None = None  # emulated link time of the last step
    extra: dict = field(default_factory=dict)


def plain(bench: Bench) -> Method:
    return Method("plain (keep all)", "plain", bench.model)


def _blocks(bench: Bench) -> list[torch.nn.Module]:
    found = find_model_blocks(bench.model)
    modules = dict(bench.model.named_modules())
    return [modules[name] for name in found.names]


def _wrap(block: torch.nn.Module, ckpt: Callable = checkpoint, **options) -> None:
    """`block`'s instance forward under one non-reentrant checkpoint (HF's own call)."""
    forward = block.forward

    @functools.wraps(forward)
    def wrapped(*args, **kwargs):
        return ckpt(forward, *args, use_reentrant=False, **options, **kwargs)

    block.forward = wrapped


def hf_checkpointing(bench: Bench, every_n: int = 1, offload: bool = False) -> Method:
    """HF `activation_checkpointing_enable(every_n_layers=, offload=)` (by hand off HF)."""
    label = "full" if every_n == 1 else f"every_n_layers={every_n}"
    label += ", offload=True" if offload else ""
    if bench.hf:
        # transformers 5.24 renamed `gradient_checkpointing_enable` (same options, as
        # 5.17 has it: the GPU machine's version) and keeps the old name as an alias
        enable = getattr(bench.model, "activation_checkpointing_enable", None)
        enable = enable or bench.model.gradient_checkpointing_enable
        enable(every_n_layers=every_n, offload=offload)
        return Method(f"HF checkpointing ({label})", "hf", bench.model)
    if offload:
        raise NotImplementedError("offload=True: a transformers API; see the emulated-link row")
    for k, block in enumerate(_blocks(bench)):
        if k % every_n == 0:
            _wrap(block)
    return Method(
        f"checkpoint per block ({label})",
        "hf",
        bench.model,
        note="not a transformers model: torch.utils.checkpoint on its blocks as HF would",
    )


def hf_offload_on_link(bench: Bench, link: Device) -> Method:
    """HF's `offload=True` code path (checkpoint under save_on_cpu) with `SaveOnLink`.

    transformers' `offload=True` wraps each block's checkpoint in
    `save_on_cpu(pin_memory=True)`, which fails on a machine without an
    accelerator; this is the same wrapping, with the emulated link's hooks.
    """
    seconds = [0.0]

    def ckpt(function, *args, **kwargs):
        with SaveOnLink(link, seconds):
            return checkpoint(function, *args, **kwargs)

    if bench.hf:
        bench.model._set_gradient_checkpointing(
            enable=True,
            gradient_checkpointing_func=functools.partial(ckpt, use_reentrant=False),
            every_n_layers=1,
        )
        bench.model.enable_input_require_grads()
    else:
        for block in _blocks(bench):
            _wrap(block, ckpt)

    def context():
        seconds[0] = 0.0
        return contextlib.nullcontext()

    return Method(
        "HF checkpointing (full) + offload on the emulated link",
        "hf",
        bench.model,
        context=context,
        link_seconds=lambda: seconds[0],
        note="offload=True's code path (checkpoint inside save_on_cpu) with SaveOnLink's hooks",
    )


def _sac_policy(save: set) -> Callable:
    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def op_sac(bench: Bench) -> Method:
    """torchtitan-style selective op checkpointing on every block (module docstring)."""
    save = SAC_SAVE | (SAC_SAVE_CONV if not bench.hf else set())
    policy = _sac_policy(save)
    for block in _blocks(bench):
        _wrap(block, context_fn=functools.partial(create_selective_checkpoint_contexts, policy))
    note = "saves mm/addmm/bmm and SDPA outputs" + ("" if bench.hf else " and convolutions")
    return Method("op SAC (torchtitan-style)", "sac", bench.model, note=note)


def compiled(bench: Bench, fraction: float) -> Method:
    """`torch.compile(model)` under `activation_memory_budget = fraction` (set at compile)."""
    import torch._dynamo
    import torch._functorch.config as functorch_config

    torch._dynamo.reset()
    functorch_config.activation_memory_budget = fraction
    return Method(
        f"torch.compile, activation_memory_budget={fraction}"
        + (" (default)" if fraction == 1.0 else ""),
        "compile",
        torch.compile(bench.model),
        compiled=True,
        extra={"fraction": fraction},
    )


def torch_save_on_cpu(bench: Bench) -> Method:
    """torch's `save_on_cpu` as shipped: on CPU its copies are the same RAM as the model's."""
    return Method(
        "save_on_cpu (torch, as shipped)",
        "save_on_cpu",
        bench.model,
        context=lambda: torch.autograd.graph.save_on_cpu(pin_memory=False),
        note="host copies are CPU tensors: the tracker counts them as device memory",
    )


class SaveOnLink(torch.autograd.graph.saved_tensors_hooks):
    """torch's `save_on_cpu` pack/unpack, host copies filed as host, copies timed on a link.

    The pack and unpack are torch's (a copy of each saved tensor made at
    pack, copied back at unpack), with the host copy allocated inside
    `planopt.runtime.tracker.host_memory()`, so `LiveMemory` files it as host
    memory (what a GPU's tracker would not see). Each copy's link time
    (`latency + bytes / bandwidth`) is added up in `seconds`: torch's
    copies run on the compute stream, so on a GPU they add to the step.
    """

    def __init__(self, link: Device, seconds: list[float]) -> None:
        def pack(tensor: torch.Tensor):
            if tensor.numel() == 0 or tensor.is_sparse:
                return (tensor.device, tensor)
            with host_memory():
                packed = torch.empty_like(tensor)
            packed.copy_(tensor)
            seconds[0] += link.transfer_latency + tensor.nbytes / link.d2h_bandwidth
            return (tensor.device, packed)

        def unpack(packed):
            _device, tensor = packed
            if tensor.numel() == 0 or tensor.is_sparse:
                return tensor
            seconds[0] += link.transfer_latency + tensor.nbytes / link.h2d_bandwidth
            return tensor.clone()  # the copy back to the device

        super().__init__(pack, unpack)


def save_on_link(bench: Bench, link: Device) -> Method:
    seconds = [0.0]

    def context():
        seconds[0] = 0.0
        return SaveOnLink(link, seconds)

    return Method(
        "save_on_cpu on the emulated link",
        "save_on_cpu",
        bench.model,
        context=context,
        link_seconds=lambda: seconds[0],
        note=f"torch's pack/unpack; host copies filed as host; + copy time on {link.name}",
    )
