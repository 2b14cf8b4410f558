"""What a plan really costs: step time and peak memory of the executor.

`measure(chain, plan, batch, loss_fn, ...)` runs training steps (forward and
backward; no optimizer step) under the plan:

* step time: the median of `iterations` steps after `warmup` ones
  (`time.perf_counter`, with `torch.cuda.synchronize` around a CUDA step);
* peak memory: `torch.cuda.max_memory_allocated` over the timed steps on a
  GPU (everything: static, saved tensors, scratch, gradients in flight); on
  CPU, static bytes plus the peak of the saved-tensor bytes the executor held
  on the device side (`Executor(track_memory=True)`), which is the quantity
  the simulator predicts when copies are instantaneous.

`plain_step_seconds` times the same step in plain PyTorch, the baseline of
the executor's overhead. Like `profile`, both leave RNG, buffers and
gradients as they found them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from planopt.plan import Plan
from planopt.profile import Profile
from planopt.runtime.chain import Chain, LossFn
from planopt.runtime.executor import Executor, StepStats
from planopt.runtime.memory import static_bytes
from planopt.runtime.profiler import _restored, _zero_grads


@dataclass(frozen=True)
class Measurement:
    """Measured step time and peak memory of one plan."""

    step_seconds: float
    step_samples: tuple[float, ...]
    peak_bytes: int
    peak_source: str
    static_bytes: int
    peak_saved_bytes: int | None
    loss: float
    device: str
    stats: StepStats


def _timed(device: torch.device, fn: Callable[[], torch.Tensor]) -> tuple[float, torch.Tensor]:
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    out = fn()
    if cuda:
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, out


def _device(chain: Chain, x: torch.Tensor, device: torch.device | str | None) -> torch.device:
    if device is not None:
        return torch.device(device)
    return next((p.device for p in chain.parameters()), x.device)


def _check_counts(iterations: int, warmup: int) -> None:
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be an integer >= 1, got {iterations!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")


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
    track_memory: bool | None = None,
) -> Measurement:
    """Step time and peak memory of `plan` (see the module docstring).

    `profile` is the profile the plan was solved for (checked by the
    executor); `optimizer` only adds its state to the static bytes on CPU.
    `track_memory` defaults to True on CPU (where it gives the peak) and
    False on CUDA (where the allocator does, and tracking would cost time).
    """
    _check_counts(iterations, warmup)
    x, y = batch
    device = _device(chain, x, device)
    x, y = x.to(device), y.to(device)
    cuda = device.type == "cuda"
    track = (not cuda) if track_memory is None else track_memory
    if not cuda and not track:
        raise ValueError("measure: on CPU the peak comes from tracking; track_memory must be True")
    executor = Executor(chain, plan, profile=profile, loss_fn=loss_fn, track_memory=track)

    def step() -> torch.Tensor:
        with executor:
            loss = executor(x, y)
            loss.backward()
        return loss

    samples: list[float] = []
    peaks: list[int] = []
    with _restored(chain, device):
        _zero_grads(chain)
        for _ in range(warmup):
            step()
            _zero_grads(chain)
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        for _ in range(iterations):
            seconds, loss = _timed(device, step)
            _zero_grads(chain)
            samples.append(seconds)
            if executor.last_step.peak_saved_bytes is not None:
                peaks.append(executor.last_step.peak_saved_bytes)
        static = static_bytes(chain, (x, y), optimizer).total
        if cuda:
            peak = torch.cuda.max_memory_allocated(device)
            source = "torch.cuda.max_memory_allocated over the timed steps"
        else:
            peak = static + max(peaks)
            source = "static bytes + peak saved-tensor bytes held by the executor (CPU)"
    executor.release_host_memory()
    return Measurement(
        step_seconds=statistics.median(samples),
        step_samples=tuple(samples),
        peak_bytes=int(peak),
        peak_source=source,
        static_bytes=static,
        peak_saved_bytes=max(peaks) if peaks else None,
        loss=float(loss.detach()),
        device=str(device),
        stats=executor.last_step,
    )


def plain_step_seconds(
    chain: Chain,
    batch: tuple[torch.Tensor, torch.Tensor],
    loss_fn: LossFn,
    *,
    device: torch.device | str | None = None,
    iterations: int = 5,
    warmup: int = 1,
) -> tuple[float, tuple[float, ...]]:
    """Median and samples of `loss_fn(chain(x), y).backward()` in plain PyTorch."""
    _check_counts(iterations, warmup)
    x, y = batch
    device = _device(chain, x, device)
    x, y = x.to(device), y.to(device)

    def step() -> torch.Tensor:
        loss = chain.loss(x, y, loss_fn)
        loss.backward()
        return loss

    samples: list[float] = []
    with _restored(chain, device):
        _zero_grads(chain)
        for _ in range(warmup):
            step()
            _zero_grads(chain)
        for _ in range(iterations):
            seconds, _ = _timed(device, step)
            _zero_grads(chain)
            samples.append(seconds)
    return statistics.median(samples), tuple(samples)
