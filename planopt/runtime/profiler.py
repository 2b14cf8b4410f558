"""Measure a chain on its device: the `planopt.profile/2` the planner solves.

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
  step, which runs plain autograd;
* `static_bytes`: parameters, buffers, optimizer state, the batch, and the
  gradients unless they are set to None;
* the device link: measured with pinned copies on CUDA, given on CPU.

Profiling leaves the model as it found it: RNG state, buffers (batch-norm
statistics) and gradients are restored.
"""

from __future__ import annotations

import statistics
import sys
import weakref

import torch
from torch.autograd.graph import saved_tensors_hooks
from tqdm import tqdm

from planopt.errors import PlanoptError, where
from planopt.profile import Device, Profile
from planopt.runtime.chain import Chain, LossFn
from planopt.runtime.counts import Counts, autocast_note, chain_layers, check_autocast
from planopt.runtime.link import measure_cuda_link
from planopt.runtime.memory import static_bytes
from planopt.runtime.steps import BackwardSteps
from planopt.runtime.storage import Saves, plain, static_keys, storage_key, storage_nbytes
from planopt.runtime.tracker import (
    AllocatorProbe,
    LiveMemory,
    MemoryProbe,
    TrackerProbe,
    at,
    device_bytes,
)
from planopt.runtime.training import Clock, check_device, prepare_grads, restored

# Written into a profile's source when gradients are set to None between steps,
# so that `measure` runs the steps of a plan in the same regime.
GRADS_TO_NONE_NOTE = "parameter gradients set to None between steps"


class ChainError(PlanoptError, ValueError):
    """A chain layer does something the cost model cannot describe."""


class TrainingStep:
    """One training step of the chain, layer by layer, with optional probes."""

    def __init__(
        self,
        chain: Chain,
        x: torch.Tensor,
        y: torch.Tensor,
        loss_fn: LossFn,
        autocast: torch.dtype | None = None,
    ) -> None:
        self.chain, self.x, self.y, self.loss_fn = chain, x, y, loss_fn
        self.n = len(chain)
        self.autocast = autocast

    def layer(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """Layer `i`'s forward, under autocast when mixed precision is asked for.

        NOTE: autocast is entered per layer, as a plan's executor would run a
        layer: its cache of cast weights is dropped at each layer's end, so a
        cast weight outlives its layer only where the layer saves it.
        """
        if self.autocast is None:
            return self.chain.run_layer(i, h, self.y, self.loss_fn)
        with torch.autocast(h.device.type, dtype=self.autocast):
            return self.chain.run_layer(i, h, self.y, self.loss_fn)

    def timed(self, clock: Clock) -> tuple[list[float], list[float]]:
        """Per-layer forward and backward seconds of one step."""
        n = self.n
        marks = [clock.mark()]
        b_start: list[object] = [None] * n
        b_end: list[object] = [None] * n

        def issue(t: int) -> None:
            b_start[t] = clock.mark()

        def end(t: int) -> None:
            b_end[t] = clock.mark()

        steps = BackwardSteps(n, issue, end)
        h = self.x
        for i in range(n):
            h = self.layer(i, h)
            marks.append(clock.mark())
            steps.watch(i, h)
        h.backward()
        clock.sync()
        fwd = [clock.seconds(marks[i], marks[i + 1]) for i in range(n)]
        bwd = [clock.seconds(b_start[t], b_end[t]) for t in range(n)]
        return fwd, bwd

    def counted(self, probe: MemoryProbe, lives: LiveMemory) -> Counts:
        """The counting step: products, gradients and scratch of every layer.

        `probe` measures scratch (the allocator on CUDA, else `lives`);
        `lives`, the live-storage tracker, says which storages a backward
        step allocated outlive it.
        """
        n = self.n
        chain = self.chain
        counts = Counts(n)
        static = static_keys(chain, (self.x, self.y))
        live: dict[int, weakref.ref] = {}  # products of earlier layers, while they live
        b_start = [0] * n
        start_level = [0]  # the level B_{L-1} starts from, in the model's terms
        grad_bytes = [0] * (n + 1)  # bytes of the gradient of x_i (i = 1 .. n)
        grad_keys = [0] * (n + 1)  # its storage's id, for the tracker

        def issue(t: int) -> None:
            at(f"B_{t}")
            b_start[t] = probe.current() if t < n - 1 else start_level[0]
            probe.reset_peak()

        def end(t: int) -> None:
            # What B_t allocated and still holds, but for the gradient of its input,
            # lives on: parameter gradients (set to None between steps) and
            # gradients waiting in autograd for another contribution (a weight
            # shared with an earlier layer, as GPT-2's tied embedding and head).
            counts.param_grad[t] = lives.alive_from(f"B_{t}", exclude=grad_keys[t : t + 1])
            counts.input_grad[t] = grad_bytes[t] if t > 0 else 0
            grown = probe.peak() - b_start[t]
            signed = grown - counts.input_grad[t] - counts.param_grad[t]
            counts.bwd_work[t] = max(0, signed)
            counts.bwd_release[t] = max(0, -signed)

        def grad_hook(i: int):
            def hook(grad: torch.Tensor) -> None:
                grad_bytes[i] = storage_nbytes(grad)
                grad_keys[i] = id(grad.untyped_storage())

            return hook

        steps = BackwardSteps(n, issue, end)
        h = self.x
        for i in range(n):
            counts.shapes.append((tuple(h.shape), str(h.dtype).removeprefix("torch.")))
            known = frozenset(k for k, ref in live.items() if _alive(ref, k))
            saves = Saves(static, storage_key(h) if i > 0 else 0, known)

            def pack(t: torch.Tensor, saves: Saves = saves) -> torch.Tensor:
                saves.add(t)
                return plain(t)

            at(f"F_{i}")
            start = probe.current()
            probe.reset_peak()
            with saved_tensors_hooks(pack, _identity):
                out = self.layer(i, h)
            grown = probe.peak() - start
            _check_output(chain, i, h, out, static)
            saves.classify(out)
            if saves.foreign:
                raise ChainError(
                    f"{where(i, chain.names[i])}: a layer must save only its input, its "
                    "output, parameters, buffers, the batch or tensors it creates, got "
                    f"{len(saves.foreign)} storage(s) created before its forward by another "
                    "layer (a module-level cache?); the cost model cannot place them"
                )
            counts.out[i] = storage_nbytes(out)
            counts.saved[i] = saves.internal_bytes()
            counts.saves_input[i] = saves.saves_input
            counts.saves_output[i] = saves.saves_output
            counts.fwd_work[i] = max(0, grown - counts.out[i] - counts.saved[i])
            # (a comprehension: a loop variable would keep the last tensor alive)
            live.update({k: weakref.ref(v.untyped_storage()) for k, v in saves.tensors.items()})
            live[storage_key(out)] = weakref.ref(out.untyped_storage())
            saves.release()
            del saves
            if i + 1 < n and out.requires_grad:
                out.register_hook(grad_hook(i + 1))  # before the step hook, which reads it
            steps.watch(i, out)
            h = out
        # The loss and the gradient backward() seeds it with stay alive through
        # the backward: static_bytes counts both (`StaticBytes.loss`), so the
        # model's level as B_{L-1} starts is the real one plus the seed, and
        # B_{L-1}'s scratch is measured from there.
        counts.seed = device_bytes(h.numel() * h.element_size(), h.device)
        start_level[0] = probe.current() + counts.seed
        h.backward()
        return counts


def _alive(ref: weakref.ref, key: int) -> bool:
    storage = ref()
    return storage is not None and storage._cdata == key


def _check_output(chain: Chain, i: int, x: torch.Tensor, out: torch.Tensor, static) -> None:
    key = storage_key(out)
    if i > 0 and key == storage_key(x):
        raise ChainError(
            f"{where(i, chain.names[i])}: a layer's output must be a new tensor, got a view "
            "or an in-place result of its input (a Flatten, an in-place ReLU or an Identity "
            "as a layer of its own); merge it into the layer before"
        )
    if key in static:
        raise ChainError(
            f"{where(i, chain.names[i])}: a layer's output must be a new tensor, got a "
            "parameter, a buffer or the batch"
        )


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


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
    )[0]


def profile_with_release(
    chain: Chain, sample_batch: tuple[torch.Tensor, torch.Tensor], loss_fn: LossFn, **options
) -> tuple[Profile, tuple[int, ...]]:
    """`profile(chain, sample_batch, loss_fn, **options)` and, per layer, the
    bytes its backward frees before its allocations peak, beyond what its
    scratch absorbs (`Counts.bwd_release`).

    Cost model v2 adds a layer's new gradients on top of everything its
    backward reads and frees all of it at the end; PyTorch frees saved
    tensors and the incoming gradient node by node inside a multi-node
    layer, so the real peak can be lower than any non-negative
    `bwd_work_bytes` can say. This is that difference, measured in the same
    counting step: the evidence for a signed backward scratch in a later
    version of the cost model (`experiments/bench_fidelity.py` reports it).
    """
    prof, counts = _measured(chain, sample_batch, loss_fn, **options)
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
) -> tuple[Profile, Counts]:
    """`profile`'s work, with what its counting step found."""
    if not isinstance(chain, Chain):
        raise TypeError(f"chain must be a planopt.runtime.Chain, got {type(chain).__name__}")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be an integer >= 1, got {iterations!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
    check_autocast(autocast)
    x, y = sample_batch
    if device is None:
        device = next((p.device for p in chain.parameters()), x.device)
    device = torch.device(device)
    check_device(chain, device)
    x, y = x.to(device), y.to(device)
    cuda = device.type == "cuda"
    if link is None:
        if not cuda:
            raise ValueError(
                "link: the host link of a CPU device cannot be measured; pass "
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
    return prof, counts


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
