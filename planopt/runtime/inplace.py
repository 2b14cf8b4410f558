"""Profile a model where its blocks sit: its own forward, its real arguments, no wrapper.

`profile_in_place(model, batch, loss_fn, link=...)` runs training steps of
the model as written (`planopt.runtime.regions` says how it is called) and
measures each region of the step as a cost-model v2 layer: the prefix
(layer 0: embeddings, rotary tables, masks), each block (layers 1 .. B,
called by the model with its attention mask, position embeddings and
`use_cache=False`) and the suffix (layer B+1: final norm, head, loss). The
measurements are those of `planopt.runtime.profile` on a chain: forward and
backward times (medians, backward steps between autograd hooks), the
products seen with `saved_tensors_hooks` and classified by storage, scratch
from the caching allocator (CUDA) or the live-storage tracker (CPU),
gradients, static bytes.

NOTE (tensors shared by blocks): a tensor the prefix makes and every block
saves (rotary cos/sin, a mask) is one of the prefix's internals, kept while
any block may read it; the model frees it at the end of the prefix's
backward, one step after the real last reader (block 0), which can only
over-predict. A block may not save a tensor another block made besides its
input (refused: the cost model has no place for it).

Returns an `InPlaceProfile`: the `planopt.Profile`, the block names and the
gradient regime the steps ran in (`apply` checks the loop against it).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from planopt.profile import Device, Layer, Profile, with_signed_scratch
from planopt.runtime.errors import RuntimeOptionError
from planopt.runtime.inplacemenus import block_menus
from planopt.runtime.inplacestep import InstrumentedStep
from planopt.runtime.link import measure_cuda_link
from planopt.runtime.memory import static_bytes
from planopt.runtime.menus import MENU_SIZE
from planopt.runtime.modelblocks import find_model_blocks
from planopt.runtime.profiler import GRADS_TO_NONE_NOTE
from planopt.runtime.regions import Batch, StepLossFn, UseCacheOff, batch_tensors
from planopt.runtime.tracker import AllocatorProbe, LiveMemory, MemoryProbe, TrackerProbe
from planopt.runtime.training import Clock, prepare_grads, restored


@dataclass(frozen=True)
class InPlaceProfile:
    """A model's in-place profile: layers prefix, blocks, suffix (see the module doc).

    `grads_to_none`: the steps ran with parameter gradients set to None
    between steps (what `optimizer.zero_grad()` does by default); False:
    kept and zeroed in place. `apply` checks the training loop against it.
    """

    profile: Profile
    blocks: tuple[str, ...]
    grads_to_none: bool
    model: str
    # Per layer, the bytes its backward frees before its allocations peak, beyond
    # what its scratch absorbs: cost model v2 cannot say it (`bwd_work_bytes` >= 0),
    # so the simulator over-predicts by up to this much inside that backward; v3's
    # signed scratch can (`profile_with_release` measures the same on a chain).
    bwd_release: tuple[int, ...] = ()

    @property
    def grad_regime(self) -> str:
        return "none" if self.grads_to_none else "kept"


def _cpu_link_error() -> ValueError:
    return ValueError(
        "link: the host link of a CPU device cannot be measured; pass "
        "link=planopt.Device(name, h2d_bandwidth, d2h_bandwidth, transfer_latency)"
    )


def profile_in_place(
    model: nn.Module,
    batch: Batch,
    loss_fn: StepLossFn | None = None,
    *,
    blocks: Sequence[str] | None = None,
    link: Device | None = None,
    iterations: int = 5,
    warmup: int = 2,
    grads_to_none: bool = True,
    optimizer: torch.optim.Optimizer | None = None,
    timer: str = "wall",
    name: str | None = None,
    signed_scratch: bool = True,
    menus: bool = True,
    menu_size: int | None = MENU_SIZE,
) -> InPlaceProfile:
    """Measure `model` on `batch` in place (module docstring); the model is left as found.

    `loss_fn(output, batch) -> scalar` (default: `output.loss`). `blocks`:
    module names of the blocks (default: found by `find_model_blocks`).
    `link`: the host link (required on CPU, measured on CUDA when omitted).
    `grads_to_none`: gradients set to None between steps (True, what
    `optimizer.zero_grad()` does by default) or kept and zeroed in place.
    `signed_scratch` (cost model v3, default True): a backward that frees
    before its gradients peak gets a negative `bwd_work_bytes` (its
    `bwd_release`, down to the floor v3 allows) instead of 0, so the
    simulator does not over-predict there (every built-in method plans it;
    the profile is then a `/3` one, menus or not); False: clamped at 0.
    `menus` (cost model v3): each block class's SAC menu, at most `menu_size`
    entries (`None`: the whole front), attached to its block layers
    (`planopt.runtime.inplacemenus`); False: a cost model v2 profile.
    """
    for what, value, low in (("iterations", iterations, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise RuntimeOptionError(f"{what} must be an integer >= {low}, got {value!r}")
    found = find_model_blocks(model, blocks)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    cuda = device.type == "cuda"
    if link is None:
        if not cuda:
            raise _cpu_link_error()
        link = measure_cuda_link(device)
        link_note = "measured with pinned-memory copies"
    else:
        link_note = f"given by the caller ({link.name})"
    step = InstrumentedStep(model, found, batch, loss_fn)
    clock = Clock(device, timer)
    n = step.n
    fwd: list[list[float]] = [[] for _ in range(n)]
    bwd: list[list[float]] = [[] for _ in range(n)]
    tensors = batch_tensors(batch)
    with UseCacheOff(model), restored(model, device):
        for _ in range(warmup):
            prepare_grads(model, grads_to_none)
            step.timed(clock)
        prepare_grads(model, grads_to_none)
        resident = torch.cuda.memory_allocated(device) if cuda else 0
        tracker = LiveMemory(device.type)
        tracker.track_model(model, tensors, optimizer)
        if cuda:
            torch.cuda.synchronize(device)
            probe: MemoryProbe = AllocatorProbe(device)
        else:
            probe = TrackerProbe(tracker)
        with tracker:
            counted, seed = step.counted(probe, tracker)
        for _ in range(iterations):
            prepare_grads(model, grads_to_none)
            f, b = step.timed(clock)
            for r in range(n):
                fwd[r].append(f[r])
                bwd[r].append(b[r])
        prepare_grads(model, grads_to_none)
        static = static_bytes(
            model,
            tensors,
            optimizer,
            grads=not grads_to_none,
            resident=resident,
            loss_bytes=counted[-1]["out_bytes"] + seed,
        )
    layers: list[Layer] = []
    release = tuple(c.pop("bwd_release") for c in counted)
    for r, c in enumerate(counted):
        shape, dtype = c.pop("shape")
        sig = None
        if 0 < r < n - 1:
            sig = f"{type(found.modules[r - 1]).__name__}|in={dtype}{list(shape)}"
        layers.append(
            Layer(
                fwd=statistics.median(fwd[r]),
                bwd=statistics.median(bwd[r]),
                signature=sig,
                **c,
            )
        )
    grads = (
        f"{GRADS_TO_NONE_NOTE}: each layer's are param_grad_bytes"
        if grads_to_none
        else "parameter gradients kept and zeroed in place: in static_bytes"
    )
    where_ = torch.cuda.get_device_name(device) if cuda else "CPU"
    source = (
        f"MEASURED IN PLACE by planopt.runtime.profile_in_place on {where_} ({device}), torch "
        f"{torch.__version__}: the model's own forward, layers prefix, {len(found)} blocks "
        f"({found.how}), suffix (loss included); medians of {iterations} steps after {warmup} "
        f"warm-up. Static: parameters, buffers, batch, {static.note}, the loss and its seed "
        f"gradient; {grads}. Link: {link_note}."
    )
    if signed_scratch:
        layers = with_signed_scratch(layers, release)
        source += " Backward scratch signed (cost model v3): minus what each backward frees first."
    prof = Profile(
        name=name or type(model).__name__,
        device=link,
        static_bytes=static.total,
        layers=tuple(layers),
        source=source,
    )
    if menus:
        prof = block_menus(model, batch, prof, found, size=menu_size, timer=timer)
    return InPlaceProfile(prof, found.names, grads_to_none, type(model).__name__, release)
