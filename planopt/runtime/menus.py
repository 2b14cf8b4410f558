"""A profile's layers with their menus: each layer class traced once, its SAC front attached.

`add_menus(prof, run, static, gpu=...)` runs the chain's forward layer by
layer (no autograd between layers), and for the first layer of each class
(its profile signature, which holds its input's shape; a layer without a
signature is its own class) traces its forward operator by operator
(`planopt.runtime.opprofile.trace_block`, the real layer with its real
input, under the same autocast as the profile's step) and builds the
Pareto front of (bytes kept, recompute seconds) over the SAC policies cost
model v3 describes, each with its replay's scratch (`planopt.sacmenu`,
`planopt.menumemory`). At most `size` entries are kept per layer (the front's
two ends and entries spread evenly in bytes between them; `None`: all of
it), as `LayerOption`s named `sac0..` with their policies (operator
positions). The model is left as found (RNG, buffers, gradients).
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Iterable

import torch

from planopt.hardware import GPU
from planopt.profile import Profile
from planopt.runtime.checkpointing import OPTION_EARLY_STOP
from planopt.runtime.counting import TrainingStep
from planopt.runtime.opprofile import trace_block
from planopt.runtime.training import restored
from planopt.sacmenu import MenuEntry, MenuError, layer_options, thin

# Entries kept per layer by default: enough for the planner to choose among,
# few enough that every method (the exact MIP included) stays quick.
MENU_SIZE = 8


def add_menus(
    prof: Profile,
    run: TrainingStep,
    static: Iterable[torch.Tensor],
    *,
    gpu: GPU | None = None,
    size: int | None = MENU_SIZE,
    timer: str = "wall",
    repeats: int = 3,
    early_stop: bool = OPTION_EARLY_STOP,
) -> Profile:
    """`prof` with each layer's menu (module doc); `gpu`: roofline times on it, else measured.

    `early_stop`: the runtime's checkpoint replays up to the last tensor the
    backward needs (torch's default, what both runtimes do:
    `checkpointing.OPTION_EARLY_STOP`), or the whole forward (False).
    """
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise MenuError(f"menu_size must be an integer >= 1 or None, got {size!r}")
    static = list(static)
    fronts: dict[str, tuple[MenuEntry, ...]] = {}
    layers = list(prof.layers)
    h = run.x
    with restored(run.chain, h.device):
        for i, layer in enumerate(prof.layers):
            key = layer.signature or f"#{i}"
            if key not in fronts:
                x = h.detach()
                if i > 0 and x.is_floating_point():
                    # not a leaf, as in training (a layer may change its input in place)
                    x = x.requires_grad_(True).clone()
                ops = trace_block(
                    functools.partial(run.layer, i),
                    (x,),
                    static=static,
                    gpu=gpu,
                    repeats=repeats,
                    timer=timer,
                )
                fronts[key] = class_front(ops, early_stop, size, layer.name)
            layers[i] = dataclasses.replace(
                layer, options=layer_options(fronts[key], below=layer.saved_bytes)
            )
            with torch.no_grad():
                h = run.layer(i, h)
    timing = f"roofline on {gpu.name}" if gpu is not None else f"measured ({timer} clock)"
    note = (
        f" Menus (cost model v3): each layer class's forward traced operator by operator "
        f"(planopt.runtime.opprofile; operator times {timing}); options are the Pareto front "
        "of (bytes kept, recompute seconds) over SAC policies saving operator positions whose "
        "checkpointed forward holds no more than the plain one, each with its replay's scratch "
        "(regen_work_bytes), "
        f"{'all of it' if size is None else f'at most {size} entries'} per layer."
    )
    return dataclasses.replace(prof, layers=tuple(layers), source=prof.source + note)


def class_front(ops, early_stop: bool, size: int | None, name: str) -> tuple[MenuEntry, ...]:
    """A layer class's menu from its operator trace (`OpProfile`), thinned to `size`
    entries; empty, with a warning naming the layer, when a group of operators is too
    large to enumerate exactly. One place for both profilers (chains, models in place)."""
    try:
        menu = ops.menu(early_stop)
    except MenuError as error:
        warnings.warn(f"{name}: no menu ({error})", stacklevel=3)
        menu = ()
    return tuple(menu) if size is None else thin(menu, size)
