"""Menus for an in-place profile: each block class traced once, as its model calls it.

`block_menus(model, batch, prof, blocks)` gives the block layers of an
in-place `Profile` (`planopt.runtime.inplace`) their SAC menus (cost model
v3): for the first block of each class (its layer's signature: class and
input shape) it captures the arguments the model really calls the block with
(a forward pre-hook during one forward of the model on `batch`, stopped
there; a transformers decoder layer gets its mask and rotary embeddings
this way), traces the block's forward operator by operator
(`planopt.runtime.opprofile.trace_block`) and attaches the Pareto front
over the SAC policies cost model v3 describes (`planopt.sacmenu`), each with
its replay's scratch, thinned to `size` entries, as `LayerOption`s.

The positions are those `apply`'s selective-checkpoint region hands its
policy: apply runs the block's own forward with the same arguments, and
`trace_block` counts operators as `create_selective_checkpoint_contexts`
does. The prefix and suffix get no menu (apply keeps them). The model is
left as found (RNG, buffers, gradients).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from planopt.profile import Profile
from planopt.runtime.checkpointing import OPTION_EARLY_STOP
from planopt.runtime.menus import class_front
from planopt.runtime.modelblocks import ModelBlocks
from planopt.runtime.opprofile import OpProfile, trace_block
from planopt.runtime.regions import Batch, UseCacheOff, batch_tensors, call_model
from planopt.runtime.training import restored
from planopt.sacmenu import MenuEntry, MenuError, layer_options


class _Stop(Exception):
    """Raised by the capture hook: the model's forward is not needed past the block."""


def block_arguments(model: nn.Module, batch: Batch, block: nn.Module) -> tuple[tuple, dict]:
    """The positional and keyword arguments `model` calls `block` with on `batch` (grad on)."""
    got: dict[str, Any] = {}

    def hook(module, args, kwargs):
        got["args"], got["kwargs"] = args, dict(kwargs)
        raise _Stop

    handle = block.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.enable_grad():
            call_model(model, batch)
    except _Stop:
        pass
    finally:
        handle.remove()
    if not got:
        raise MenuError("menus: the model never called the block on this batch")
    return got["args"], got["kwargs"]


def block_trace(
    model: nn.Module, batch: Batch, block: nn.Module, *, timer: str = "wall", repeats: int = 3
) -> OpProfile:
    """The `OpProfile` of `block` called as `model` calls it on `batch` (`use_cache` off,
    as the in-place step and apply run it: a cache would add operators)."""
    static = [*batch_tensors(batch), *model.parameters(), *model.buffers()]
    with UseCacheOff(model):
        args, kwargs = block_arguments(model, batch, block)
        return trace_block(block, args, kwargs, static=static, timer=timer, repeats=repeats)


def block_menus(
    model: nn.Module,
    batch: Batch,
    prof: Profile,
    blocks: ModelBlocks,
    *,
    size: int | None,
    timer: str = "wall",
    repeats: int = 3,
    early_stop: bool = OPTION_EARLY_STOP,
) -> Profile:
    """`prof` (prefix, blocks, suffix) with each block layer's menu (module doc)."""
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise MenuError(f"menu_size must be an integer >= 1 or None, got {size!r}")
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    fronts: dict[str, tuple[MenuEntry, ...]] = {}
    layers = list(prof.layers)
    with restored(model, device):
        for r, block in enumerate(blocks.modules, start=1):
            layer = layers[r]
            key = layer.signature or f"#{r}"
            if key not in fronts:
                ops = block_trace(model, batch, block, timer=timer, repeats=repeats)
                fronts[key] = class_front(ops, early_stop, size, blocks.names[r - 1])
            layers[r] = dataclasses.replace(
                layer, options=layer_options(fronts[key], below=layer.saved_bytes)
            )
    note = (
        " Menus (cost model v3): each block class traced once, operator by operator, with "
        "the arguments its model calls it with (planopt.runtime.inplacemenus; operator times "
        f"measured, {timer} clock); options are the Pareto front of (bytes kept, recompute "
        "seconds) over SAC policies saving operator positions whose checkpointed forward holds "
        "no more than the plain one, each with its replay's scratch (regen_work_bytes), "
        f"{'all of it' if size is None else f'at most {size} entries'} per block."
    )
    return dataclasses.replace(prof, layers=tuple(layers), source=prof.source + note)
