"""What a plan really costs: step time and peak memory, as PyTorch holds it.

`measure(chain, plan, batch, loss_fn, ...)` runs training steps (forward and
backward; no optimizer step) under the plan:

* step time: the median of `iterations` steps after `warmup` ones
  (`time.perf_counter`; on CUDA, events on the compute stream, recorded
  once the device is idle and after the step's copies have ended);
* peak memory, from outside the executor: `torch.cuda.max_memory_allocated`
  over the timed steps on a GPU (reserved bytes beside it); elsewhere the
  live-storage tracker (`planopt.runtime.tracker.LiveMemory`) over one more
  step, run apart from the timed ones (tracking every operator costs time).
  With `link=` on CPU the copies run on host threads over the emulated link
  (`planopt.runtime.threadcopies`) and overlap compute as on a GPU.
  Both count everything the step holds: static tensors, saved and
  regenerated tensors, copies back, gradients, scratch. On CPU the host
  copies of swapped tensors are left out (they stand for host memory).

`plain_step_seconds` times the same step in plain PyTorch, the baseline of
the executor's overhead. Like `profile`, both leave RNG, buffers and
gradients as they found them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from planopt.plan import Plan
from planopt.profile import Device, Profile
from planopt.runtime.chain import Chain, LossFn
from planopt.runtime.executor import Executor, StepStats
from planopt.runtime.inputs import check_batch, check_chain, check_count, check_loss, check_loss_fn
from planopt.runtime.memory import static_bytes
from planopt.runtime.profiler import GRADS_TO_NONE_NOTE
from planopt.runtime.storage import storage_nbytes
from planopt.runtime.tracker import AllocatorProbe, LiveMemory, device_bytes
from planopt.runtime.training import check_device, optimizer_state, prepare_grads, restored


@dataclass(frozen=True)
class Measurement:
    """Measured step time and peak memory of one plan.

    `peak_categories` splits the peak by what was live (the tracker's
    categories; on CUDA, only the total), `peak_where` names the operation
    the step was in (`F_3`, `B_5`, `R_2..4` for a recompute block).
    """

    step_seconds: float
    step_samples: tuple[float, ...]
    peak_bytes: int
    peak_source: str
    static_bytes: int
    loss: float
    device: str
    stats: StepStats
    reserved_bytes: int | None = None
    peak_categories: dict[str, int] = field(default_factory=dict)
    peak_where: str = ""


def _timed(device: torch.device, fn: Callable[[], torch.Tensor]) -> tuple[float, torch.Tensor]:
    """Seconds of `fn()`: CUDA events on a GPU, `time.perf_counter` elsewhere.

    On CUDA the device is idle when the start event is recorded, and `fn`
    returns only after the copy streams are done (`Executor.synchronize`),
    so the end event, recorded on the compute stream after it, marks the
    end of the step's last kernel and of its last copy.
    """
    if device.type != "cuda":
        start = time.perf_counter()
        out = fn()
        return time.perf_counter() - start, out
    torch.cuda.synchronize(device)
    stream = torch.cuda.current_stream(device)
    start_event = torch.cuda.Event(enable_timing=True)
    end_event = torch.cuda.Event(enable_timing=True)
    start_event.record(stream)
    out = fn()
    end_event.record(stream)
    end_event.synchronize()
    return start_event.elapsed_time(end_event) / 1000.0, out


def _device(chain: Chain, x: torch.Tensor, device: torch.device | str | None) -> torch.device:
    if device is not None:
        return torch.device(device)
    return next((p.device for p in chain.parameters()), x.device)


def _check_args(fn: str, chain, batch, loss_fn, iterations: int, warmup: int, device):
    """The arguments every step function shares; `(x, y, device)` on the step's device."""
    check_chain(chain, fn)
    x, y = check_batch(batch, fn)
    check_loss_fn(loss_fn, fn)
    check_count("iterations", iterations, 0, fn)
    check_count("warmup", warmup, 0, fn)
    device = _device(chain, x, device)
    check_device(chain, device)
    return x.to(device), y.to(device), device


def grads_regime(profile: Profile | None, grads_to_none: bool | None) -> bool:
    """Gradients set to None between steps? Given, else as the profile was measured."""
    if grads_to_none is not None:
        return grads_to_none
    # `profile` writes the regime into the profile's source; a profile from
    # elsewhere is taken to keep its gradients (the profiler's default).
    return profile is not None and GRADS_TO_NONE_NOTE in (profile.source or "")


def measure(
    chain: Chain,
    plan: Plan,
    batch: tuple[torch.Tensor, torch.Tensor],
    loss_fn: LossFn,
    *,
    profile: Profile | None = None,
    device: torch.device | str | None = None,
    iterations: int = 5,
    warmup: int = 1,
    optimizer: torch.optim.Optimizer | None = None,
    grads_to_none: bool | None = None,
    link: Device | None = None,
    link_clock: str = "wall",
) -> Measurement:
    """Step time and peak memory of `plan` (see the module docstring).

    `profile` is the profile the plan was solved for (the executor needs it
    for plans that swap or recompute, and checks it). `grads_to_none`: are
    gradients set to None between steps (default: as in the profile)?
    `optimizer` adds its state to what is tracked and to the static bytes;
    a fresh one's state is allocated first (one step on zero gradients,
    undone after), as `profile(..., optimizer=)` counts it.
    `iterations=0` skips the timing (memory only). `link` (CPU only)
    rehearses the plan over an emulated host link: copies run on host
    threads and take `latency + bytes / bandwidth` (`ThreadCopies`), so a
    swap's stalls are in the step time; `link_clock="thread"` runs that link
    on the compute thread's CPU time plus its waits (see
    `planopt.runtime.threadcopies`; the step is still timed on the wall clock).
    """
    x, y, device = _check_args("measure", chain, batch, loss_fn, iterations, warmup, device)
    cuda = device.type == "cuda"
    to_none = grads_regime(profile, grads_to_none)
    executor = Executor(
        chain, plan, profile=profile, loss_fn=loss_fn, link=link, link_clock=link_clock
    )

    def step() -> torch.Tensor:
        with executor:
            loss = executor(x, y)
            check_loss(loss, loss_fn, "measure")
            loss.backward()
        executor.synchronize()  # the makespan is the end of the last copy too
        return loss.detach()

    samples: list[float] = []
    reserved = None
    with restored(chain, device), optimizer_state(optimizer):
        for _ in range(warmup):
            prepare_grads(chain, to_none)
            step()
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        for _ in range(iterations):
            prepare_grads(chain, to_none)
            seconds, loss = _timed(device, step)
            samples.append(seconds)
        if cuda:
            probe = AllocatorProbe(device)
            if not iterations:
                prepare_grads(chain, to_none)
                loss = step()
            peak, reserved = probe.peak(), probe.reserved_peak()
            source, categories, where_ = probe.source, {}, ""
        else:
            prepare_grads(chain, to_none)
            tracker = LiveMemory(device.type)
            tracker.track_model(chain, (x, y), optimizer)
            with tracker:
                loss = step()
            peak, source = tracker.peak, tracker.__class__.__module__ + ".LiveMemory"
            categories, where_ = tracker.summary(), tracker.peak_where
        loss_bytes = storage_nbytes(loss) + device_bytes(loss.numel() * loss.element_size(), device)
        static = static_bytes(chain, (x, y), optimizer, grads=not to_none, loss_bytes=loss_bytes)
    executor.release_host_memory()
    return Measurement(
        step_seconds=statistics.median(samples) if samples else float("nan"),
        step_samples=tuple(samples),
        peak_bytes=int(peak),
        peak_source=source,
        static_bytes=static.total,
        loss=float(loss),
        device=str(device),
        stats=executor.last_step,
        reserved_bytes=reserved,
        peak_categories=categories,
        peak_where=where_,
    )


def plain_step_seconds(
    chain: Chain,
    batch: tuple[torch.Tensor, torch.Tensor],
    loss_fn: LossFn,
    *,
    device: torch.device | str | None = None,
    iterations: int = 5,
    warmup: int = 1,
    grads_to_none: bool = False,
) -> tuple[float, tuple[float, ...]]:
    """Median and samples of `loss_fn(chain(x), y).backward()` in plain PyTorch."""
    x, y, device = _check_args(
        "plain_step_seconds", chain, batch, loss_fn, iterations, warmup, device
    )

    def step() -> torch.Tensor:
        loss = chain.loss(x, y, loss_fn) if loss_fn is not None else chain(x)
        check_loss(loss, loss_fn, "plain_step_seconds")
        loss.backward()
        return loss

    samples: list[float] = []
    with restored(chain, device):
        for _ in range(warmup):
            prepare_grads(chain, grads_to_none)
            step()
        for _ in range(iterations):
            prepare_grads(chain, grads_to_none)
            seconds, _ = _timed(device, step)
            samples.append(seconds)
    return statistics.median(samples), tuple(samples)
