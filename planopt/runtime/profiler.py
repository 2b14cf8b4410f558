"""Measure a chain on its device: the `planopt.profile/3` (or /2) the planner solves.

`profile(chain, sample_batch, loss_fn, device=..., iterations=..., warmup=...)`
runs training steps (forward and backward, the loss fused into the last
layer; never an optimizer step) and measures per layer:

* `fwd`, `bwd`: the median over `iterations` timed steps after `warmup`
  ones; CUDA events on a GPU, `time.perf_counter` on CPU (where every
  operator is synchronous). A backward step is timed between the autograd
  hooks that mark it (`planopt.runtime.steps`).
* the products, in one more step (the counting step) with
  `saved_tensors_hooks`: `out_bytes`, `saved_bytes` (internals),
  `saves_input`, `saves_output` (`planopt.runtime.storage` says how each
  saved storage is classified);
* the gradients: `input_grad_bytes` (the gradient of the layer's input, seen
  by a hook on it) and, when gradients are set to None between steps
  (`grads_to_none=True`, what `zero_grad()` does by default),
  `param_grad_bytes` (the parameter gradients that appear during its
  backward; otherwise they exist before the step and are in `static_bytes`);
* scratch: the peak of memory during each forward and each backward, beyond
  what the cost model already holds there (`fwd_work_bytes`,
  `bwd_work_bytes`), read from the caching allocator on CUDA and from the
  live-storage tracker (`planopt.runtime.tracker`) on CPU, in the counting
  step, which runs plain autograd; a backward that frees more before its
  allocations peak than it allocates gets a negative `bwd_work_bytes` (cost
  model v3, 12.6; `signed_scratch`, on by default), else 0;
* `static_bytes`: parameters, buffers, optimizer state, the batch, and the
  gradients unless they are set to None;
* the device link: measured with pinned copies on CUDA, given on CPU.

Profiling leaves the model as it found it: RNG state, buffers (batch-norm
statistics) and gradients are restored.
"""

from __future__ import annotations

import statistics
import sys

import torch
from tqdm import tqdm

from planopt.profile import Device, Profile
from planopt.runtime.chain import Chain, LossFn
from planopt.runtime.counting import TrainingStep
from planopt.runtime.counts import (
    Counts,
    autocast_note,
    chain_layers,
    check_autocast,
    sign_scratch,
)
from planopt.runtime.errors import RuntimeOptionError
from planopt.runtime.inputs import (
    check_batch,
    check_chain,
    check_choice,
    check_count,
    check_loss_fn,
)
from planopt.runtime.link import measure_cuda_link
from planopt.runtime.memory import static_bytes
from planopt.runtime.menus import MENU_SIZE, add_menus
from planopt.runtime.tracker import (
    AllocatorProbe,
    LiveMemory,
    MemoryProbe,
    TrackerProbe,
)
from planopt.runtime.training import TIMERS, Clock, check_device, prepare_grads, restored

# Written into a profile's source when gradients are set to None between steps,
# so that `measure` runs the steps of a plan in the same regime.
GRADS_TO_NONE_NOTE = "parameter gradients set to None between steps"


_CPU_TIMERS = {
    "wall": "time.perf_counter; CPU operators are synchronous",
    "thread": "time.thread_time, the compute thread's CPU time; CPU operators are synchronous",
}


def _source(
    device: torch.device,
    iterations: int,
    warmup: int,
    link_note: str,
    static_note: str,
    grads_to_none: bool,
    timer: str = "wall",
) -> str:
    cuda = device.type == "cuda"
    where_ = torch.cuda.get_device_name(device) if cuda else "CPU"
    grads = (
        f"{GRADS_TO_NONE_NOTE}: each layer's are param_grad_bytes"
        if grads_to_none
        else "parameter gradients kept and zeroed in place: in static_bytes"
    )
    return (
        f"MEASURED by planopt.runtime.profile on {where_} ({device}), torch {torch.__version__}: "
        f"per-layer median of {iterations} training steps after {warmup} warm-up "
        f"({'CUDA events' if cuda else _CPU_TIMERS[timer]}; "
        "backward steps timed between autograd hooks; loss fused into the last layer). "
        "Products (cost model v2): every storage autograd saves during a layer's forward, "
        "seen with saved_tensors_hooks, classified as its input, its output or an internal; "
        "each storage counted once. "
        + (
            "Scratch and gradients: CUDA caching-allocator counters (sizes rounded to its "
            "512-byte blocks); static also holds what the allocator holds besides the "
            "model's tensors as a step starts (cuBLAS workspaces). "
            if cuda
            else "Scratch and gradients: the live-storage tracker "
            "(planopt.runtime.tracker, a TorchDispatchMode). "
        )
        + f"Static: parameters, buffers, batch, {static_note}, the loss and its seed gradient "
        f"(held by the caller through the backward); {grads}. Link: {link_note}."
    )


def profile(
    chain: Chain,
    sample_batch: tuple[torch.Tensor, torch.Tensor],
    loss_fn: LossFn,
    *,
    device: torch.device | str | None = None,
    iterations: int = 10,
    warmup: int = 3,
    link: Device | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    grads_to_none: bool = False,
    name: str = "chain",
    progress: bool | None = None,
    autocast: torch.dtype | None = None,
    timer: str = "wall",
    menus: bool = True,
    menu_size: int | None = MENU_SIZE,
    signed_scratch: bool = True,
) -> Profile:
    """The measured `Profile` of `chain` on `sample_batch` (see the module docstring).

    `device` defaults to where the chain's parameters are; the batch is moved
    there. `link` is the host link (required on CPU; measured on CUDA when
    omitted). `grads_to_none`: gradients are set to None between steps (as
    `optimizer.zero_grad()` does by default; the model then over-predicts,
    see the README); False (default): they are kept and zeroed in place.
    `progress`: a tqdm bar on stderr (None: only on a terminal).
    `autocast`: mixed precision (`torch.bfloat16` or `torch.float16`), each
    layer's forward under `torch.autocast` (the backward follows the dtypes).
    `timer` (CPU): "wall" (`time.perf_counter`, default) or "thread" (the
    compute thread's CPU time, which leaves out other processes' load on a
    shared machine; see `planopt.runtime.training.Clock`).
    `menus`: each layer's menu of SAC options (cost model v3, a `/3` profile;
    `planopt.runtime.menus`), at most `menu_size` per layer (None: the
    whole front); False: no menus.
    `signed_scratch` (cost model v3, 12.6; default True): a backward that
    frees before its allocations peak (a multi-node layer: each node frees
    what it saved) gets a negative `bwd_work_bytes`, minus that release
    (`profile_with_release`) down to the floor v3 allows; False: clamped at
    0, which over-predicts such a layer's peak by its release (up to 8% of
    the peak with gradients set to None, experiments/results/fidelity_memory_menus.md).
    Every built-in method plans a negative scratch. A profile with one, or
    with menus, is a `/3` profile; with neither, `/2`.
    """
    return _measured(
        chain,
        sample_batch,
        loss_fn,
        device=device,
        iterations=iterations,
        warmup=warmup,
        link=link,
        optimizer=optimizer,
        grads_to_none=grads_to_none,
        name=name,
        progress=progress,
        autocast=autocast,
        timer=timer,
        menus=menus,
        menu_size=menu_size,
        signed_scratch=signed_scratch,
    )[0]


def profile_with_release(
    chain: Chain, sample_batch: tuple[torch.Tensor, torch.Tensor], loss_fn: LossFn, **options
) -> tuple[Profile, tuple[int, ...]]:
    """`profile(chain, sample_batch, loss_fn, signed_scratch=False, **options)` (the
    scratch clamped at 0, as cost model v2 reads it, unless `options` ask for
    it signed) and, per layer, the bytes its backward frees before its
    allocations peak, beyond what its scratch absorbs (`Counts.bwd_release`).

    Cost model v2 adds a layer's new gradients on top of everything its
    backward reads and frees all of it at the end; PyTorch frees saved
    tensors and the incoming gradient node by node inside a multi-node
    layer, so the real peak can be lower than any non-negative
    `bwd_work_bytes` can say. This is that difference, measured in the same
    counting step: what cost model v3's signed scratch says (`profile`'s
    default; `experiments/bench_fidelity.py` compares both readings).
    """
    prof, counts = _measured(chain, sample_batch, loss_fn, **{"signed_scratch": False, **options})
    return prof, tuple(counts.bwd_release)


def _measured(
    chain: Chain,
    sample_batch: tuple[torch.Tensor, torch.Tensor],
    loss_fn: LossFn,
    *,
    device: torch.device | str | None = None,
    iterations: int = 10,
    warmup: int = 3,
    link: Device | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    grads_to_none: bool = False,
    name: str = "chain",
    progress: bool | None = None,
    autocast: torch.dtype | None = None,
    timer: str = "wall",
    menus: bool = True,
    menu_size: int | None = MENU_SIZE,
    signed_scratch: bool = True,
) -> tuple[Profile, Counts]:
    """`profile`'s work, with what its counting step found."""
    check_chain(chain, "profile")
    check_count("iterations", iterations, 1, "profile")
    check_count("warmup", warmup, 0, "profile")
    check_loss_fn(loss_fn, "profile")
    check_autocast(autocast)
    check_choice("timer", timer, TIMERS, "profile")
    if link is not None and not isinstance(link, Device):
        raise RuntimeOptionError(
            f"profile: link must be a planopt.Device, got {type(link).__name__}"
        )
    x, y = check_batch(sample_batch, "profile")
    if device is None:
        device = next((p.device for p in chain.parameters()), x.device)
    device = torch.device(device)
    check_device(chain, device)
    x, y = x.to(device), y.to(device)
    cuda = device.type == "cuda"
    if link is None:
        if not cuda:
            raise RuntimeOptionError(
                f"profile: link is required on a {device.type} device (its host link cannot "
                "be measured), got None; pass "
                "link=planopt.Device(name, h2d_bandwidth, d2h_bandwidth, transfer_latency)"
            )
        link = measure_cuda_link(device)
        link_note = "D2H/H2D bandwidth and latency measured with pinned-memory copies"
    else:
        link_note = f"given by the caller ({link.name})"

    run = TrainingStep(chain, x, y, loss_fn, autocast)
    clock = Clock(device, timer)
    n = len(chain)
    fwd: list[list[float]] = [[] for _ in range(n)]
    bwd: list[list[float]] = [[] for _ in range(n)]
    bar = tqdm(
        total=warmup + 1 + iterations,
        desc=f"profiling {name}",
        file=sys.stderr,
        disable=None if progress is None else not progress,
        leave=False,
    )
    with restored(chain, device), bar:
        for _ in range(warmup):
            prepare_grads(chain, grads_to_none)
            run.timed(clock)
            bar.update()
        prepare_grads(chain, grads_to_none)
        # CUDA: what the allocator holds besides the model's tensors (cuBLAS
        # workspaces made by the warm-up, anything else on the device) is
        # resident too; on CPU the tracker sees only the model's tensors.
        resident = torch.cuda.memory_allocated(device) if cuda else 0
        counts = _counting_step(run, chain, device, (x, y), optimizer)
        bar.update()
        for _ in range(iterations):
            prepare_grads(chain, grads_to_none)
            f, b = run.timed(clock)
            for i in range(n):
                fwd[i].append(f[i])
                bwd[i].append(b[i])
            bar.update()
        prepare_grads(chain, grads_to_none)
        static = static_bytes(
            chain,
            (x, y),
            optimizer,
            grads=not grads_to_none,
            resident=resident,
            loss_bytes=counts.out[n - 1] + counts.seed,
        )

    layers = chain_layers(
        chain,
        counts,
        [statistics.median(f) for f in fwd],
        [statistics.median(b) for b in bwd],
    )
    prof = Profile(
        name=name,
        device=link,
        static_bytes=static.total,
        layers=layers,
        source=_source(device, iterations, warmup, link_note, static.note, grads_to_none, timer)
        + autocast_note(autocast),
    )
    if menus:
        static = [*chain.parameters(), *chain.buffers(), x, y]
        prof = add_menus(prof, run, static, size=menu_size, timer=timer, repeats=iterations)
    return (sign_scratch(prof, counts.bwd_release) if signed_scratch else prof), counts


def _counting_step(run: TrainingStep, chain: Chain, device, batch, optimizer) -> Counts:
    """The counting step under the device's memory probe (allocator or tracker)."""
    tracker = LiveMemory(device.type)
    tracker.track_model(chain, batch, optimizer)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        probe: MemoryProbe = AllocatorProbe(device)
    else:
        probe = TrackerProbe(tracker)
    with tracker:
        return run.counted(probe, tracker)
