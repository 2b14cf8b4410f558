"""Around a training step: gradients as a step starts, and a model left as it was found.

The profiler, `measure` and `check` run real training steps on the user's
model; these helpers make every step start alike (gradients set to None,
or kept and zeroed in place) and undo what the steps change.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import torch
from torch import nn

from planopt.runtime.errors import DeviceError, RuntimeOptionError


def prepare_grads(chain: torch.nn.Module, grads_to_none: bool) -> None:
    """Gradients as a step starts: None, or allocated and zeroed in place (static)."""
    for p in chain.parameters():
        if grads_to_none:
            p.grad = None
        elif p.grad is not None:
            p.grad.zero_()
        elif p.requires_grad:
            p.grad = torch.zeros_like(p)


@contextlib.contextmanager
def restored(chain: nn.Module, device: torch.device) -> Iterator[None]:
    """Undo what training steps change: RNG, buffers, gradients."""
    cuda = device.type == "cuda" and torch.cuda.is_available()
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state(device) if cuda else None
    buffers = [(b, b.detach().clone()) for b in chain.buffers()]
    grads = [(p, None if p.grad is None else p.grad.detach().clone()) for p in chain.parameters()]
    try:
        yield
    finally:
        torch.set_rng_state(cpu_rng)
        if cuda:
            torch.cuda.set_rng_state(cuda_rng, device)
        with torch.no_grad():
            for buf, value in buffers:
                buf.copy_(value)
        for p, grad in grads:
            p.grad = grad


@contextlib.contextmanager
def optimizer_state(
    optimizer: torch.optim.Optimizer | None,
) -> Iterator[torch.optim.Optimizer | None]:
    """The optimizer with its state allocated, as after its first step.

    `profile(..., optimizer=)` counts a fresh optimizer's state in
    `static_bytes` as its first step will allocate it; a measured step must
    hold it too. A fresh optimizer steps once here on zero gradients, its
    parameters and gradients are put back after, and its state is emptied
    again on exit, so the caller's optimizer is left fresh.
    """
    fresh = optimizer is not None and not any(
        torch.is_tensor(v) for state in optimizer.state.values() for v in state.values()
    )
    if not fresh:
        yield optimizer
        return
    try:
        _first_step(optimizer)
        yield optimizer
    finally:
        optimizer.state.clear()


def _first_step(optimizer: torch.optim.Optimizer) -> None:
    """One step on zero gradients, for its state; parameters and gradients put back."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    with torch.no_grad():
        values = [p.detach().clone() for p in params]
    grads = [p.grad for p in params]
    try:
        for p in params:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
        optimizer.step()
    except TypeError as exc:  # LBFGS and the like: step(closure) only
        raise RuntimeOptionError(
            f"optimizer: a fresh {type(optimizer).__name__} must be stepped once before it "
            "is measured (its state does not exist yet, and its step needs a closure), got "
            "one with no state"
        ) from exc
    finally:
        with torch.no_grad():
            for p, value in zip(params, values, strict=True):
                p.copy_(value)
        for p, grad in zip(params, grads, strict=True):
            p.grad = grad


TIMERS = ("wall", "thread")


class Clock:
    """Marks on the compute stream: CUDA events on a GPU, perf_counter elsewhere.

    NOTE (timer="thread", CPU only): `time.thread_time`, the CPU time of the
    thread that runs the step (CPU autograd runs the backward on the calling
    thread). It leaves out the time the thread was runnable but not running,
    so on a machine shared with other processes a layer's time is its own
    work, not the load; the cost a step pays for that load is the wall time
    minus it.
    """

    def __init__(self, device: torch.device, timer: str = "wall") -> None:
        if timer not in TIMERS:
            raise RuntimeOptionError(f"timer must be one of {', '.join(TIMERS)}, got {timer!r}")
        self.cuda = device.type == "cuda"
        if self.cuda and timer != "wall":
            raise RuntimeOptionError(
                f"timer: {timer!r} is for CPU devices; CUDA is timed with events"
            )
        self.device = device
        self._now = time.thread_time if timer == "thread" else time.perf_counter

    def mark(self) -> object:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(self.device))
            return event
        return self._now()

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def seconds(self, start: object, end: object) -> float:
        if self.cuda:
            return max(0.0, start.elapsed_time(end) / 1000.0)
        return max(0.0, end - start)


def check_device(chain: nn.Module, device: torch.device) -> None:
    """Refuse a chain whose parameters are not on `device`."""
    for name, p in chain.named_parameters():
        if p.device != device and not (p.device.type == device.type and device.index is None):
            raise DeviceError(
                f"chain: parameter {name} must be on {device}, got {p.device}; "
                "call chain.to(device) first"
            )
