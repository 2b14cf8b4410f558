"""Measure a chain on its device: the `planopt.Profile` the planner solves.

`profile(chain, sample_batch, loss_fn, device=..., iterations=..., warmup=...)`
runs training steps (forward and backward, the loss fused into the last
layer; never an optimizer step) and measures per layer:

* `fwd`, `bwd`: the median over `iterations` timed steps after `warmup`
  ones; CUDA events on a GPU, `time.perf_counter` on CPU (where every
  operator is synchronous). A backward step is timed between the autograd
  hooks that mark it (`planopt.runtime.steps`).
* `saved_bytes`: counted exactly in one more step with
  `saved_tensors_hooks` (what `s_i` is: `planopt.runtime.storage`).
* scratch: on CUDA, from the caching allocator's peak during each forward
  and backward, beyond what the cost model already holds; not measurable on
  CPU (0, said so in `source`).
* `static_bytes`: parameters, gradients, buffers, optimizer state, the batch.
* the device link: measured with pinned copies on CUDA, given on CPU.

Profiling leaves the model as it found it: RNG state, buffers (batch-norm
statistics) and gradients are restored.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Iterator

import torch
from torch.autograd.graph import saved_tensors_hooks
from tqdm import tqdm

from planopt.profile import Device, Layer, Profile
from planopt.runtime.chain import Chain, LossFn
from planopt.runtime.link import measure_cuda_link
from planopt.runtime.memory import static_bytes
from planopt.runtime.steps import BackwardSteps
from planopt.runtime.storage import SavedSet, plain, static_keys


class _Clock:
    """Marks on the compute stream: CUDA events on a GPU, perf_counter elsewhere."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device

    def mark(self) -> object:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record(torch.cuda.current_stream(self.device))
            return event
        return time.perf_counter()

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def seconds(self, start: object, end: object) -> float:
        if self.cuda:
            return max(0.0, start.elapsed_time(end) / 1000.0)
        return max(0.0, end - start)


def _zero_grads(chain: Chain) -> None:
    # Gradients stay allocated (they are static memory) and are zeroed in place,
    # as `measure` does, so backward timings and scratch see the same regime.
    for p in chain.parameters():
        if p.grad is not None:
            p.grad.zero_()


@contextlib.contextmanager
def _restored(chain: Chain, device: torch.device) -> Iterator[None]:
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
            if grad is None:
                p.grad = None
            else:
                p.grad.copy_(grad)


class _Run:
    """One training step of the chain, layer by layer, with optional probes."""

    def __init__(self, chain: Chain, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn) -> None:
        self.chain, self.x, self.y, self.loss_fn = chain, x, y, loss_fn
        self.n = len(chain)

    def timed(self, clock: _Clock) -> tuple[list[float], list[float]]:
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
            h = self.chain.run_layer(i, h, self.y, self.loss_fn)
            marks.append(clock.mark())
            steps.watch(i, h)
        h.backward()
        clock.sync()
        fwd = [clock.seconds(marks[i], marks[i + 1]) for i in range(n)]
        bwd = [clock.seconds(b_start[t], b_end[t]) for t in range(n)]
        return fwd, bwd

    def counted(self, device: torch.device) -> _Counts:
        """Saved bytes per layer, forward and backward scratch (CUDA), input shapes."""
        n = self.n
        cuda = device.type == "cuda"
        counts = _Counts(n)
        static = static_keys(self.chain, (self.x, self.y))
        out_bytes = [0] * n
        earlier: set[int] = set()
        b_start = [0] * n

        def issue(t: int) -> None:
            if cuda:
                b_start[t] = torch.cuda.memory_allocated(device)
                torch.cuda.reset_peak_memory_stats(device)

        def end(t: int) -> None:
            if cuda:
                grown = torch.cuda.max_memory_allocated(device) - b_start[t]
                # The incoming gradient is alive at the start of B_t; the cost
                # model has no other term for it.
                counts.bwd_work[t] = max(0, grown) + out_bytes[t]

        steps = BackwardSteps(n, issue, end)
        h = self.x
        for i in range(n):
            counts.shapes.append((tuple(h.shape), str(h.dtype).removeprefix("torch.")))
            saved = SavedSet(static)
            before = torch.cuda.memory_allocated(device) if cuda else 0
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)

            def pack(t: torch.Tensor, saved: SavedSet = saved) -> torch.Tensor:
                saved.add(t)
                return plain(t)

            with saved_tensors_hooks(pack, _identity):
                h = self.chain.run_layer(i, h, self.y, self.loss_fn)
            saved.add(h)
            out_bytes[i] = h.numel() * h.element_size()
            counts.saved[i] = saved.nbytes
            if cuda:
                # Storages of s_i that existed before F_i (its input) are not new.
                new = sum(
                    saved.slots[slot].untyped_storage().nbytes()
                    for key, slot in saved.keys.items()
                    if key not in earlier
                )
                peak = torch.cuda.max_memory_allocated(device)
                counts.fwd_work[i] = max(0, peak - before - new)
            earlier.update(saved.keys)
            del saved  # the probe's references must not outlive autograd's
            steps.watch(i, h)
        h.backward()
        return counts


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


class _Counts:
    """What the counting step measured, per layer."""

    def __init__(self, n: int) -> None:
        self.saved = [0] * n
        self.fwd_work = [0] * n
        self.bwd_work = [0] * n
        self.shapes: list[tuple[tuple[int, ...], str]] = []


def _check_device(chain: Chain, device: torch.device) -> None:
    for name, p in chain.named_parameters():
        if p.device != device and not (p.device.type == device.type and device.index is None):
            raise ValueError(
                f"chain: parameter {name} must be on {device}, got {p.device}; "
                "call chain.to(device) first"
            )


def _source(
    device: torch.device, iterations: int, warmup: int, link_note: str, static_note: str
) -> str:
    cuda = device.type == "cuda"
    where = torch.cuda.get_device_name(device) if cuda else "CPU"
    return (
        f"MEASURED by planopt.runtime.profile on {where} ({device}), torch {torch.__version__}: "
        f"per-layer median of {iterations} training steps after {warmup} warm-up "
        f"({'CUDA events' if cuda else 'time.perf_counter; CPU operators are synchronous'}; "
        "backward steps timed between autograd hooks; loss fused into the last layer). "
        "saved_bytes: distinct storages each layer's autograd saves plus its output, counted "
        "with saved_tensors_hooks; a storage read by two layers' backward counts in each "
        "(the cost model's s_i is what B_i reads). "
        + (
            "Scratch: CUDA caching-allocator peaks beyond the model's tensors (backward adds "
            "the incoming gradient). "
            if cuda
            else "Scratch: not measurable on CPU, given as 0 (unknown). "
        )
        + f"Static: parameters, gradients, buffers, batch; {static_note}. Link: {link_note}."
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
    name: str = "chain",
    progress: bool | None = None,
) -> Profile:
    """The measured `Profile` of `chain` on `sample_batch` (see the module docstring).

    `device` defaults to where the chain's parameters are; the batch is moved
    there. `link` is the host link (required on CPU; measured on CUDA when
    omitted). `progress`: a tqdm bar on stderr (None: only on a terminal).
    """
    if not isinstance(chain, Chain):
        raise TypeError(f"chain must be a planopt.runtime.Chain, got {type(chain).__name__}")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be an integer >= 1, got {iterations!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
    x, y = sample_batch
    if device is None:
        device = next((p.device for p in chain.parameters()), x.device)
    device = torch.device(device)
    _check_device(chain, device)
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

    run = _Run(chain, x, y, loss_fn)
    clock = _Clock(device)
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
    with _restored(chain, device), bar:
        _zero_grads(chain)
        for _ in range(warmup):
            run.timed(clock)
            _zero_grads(chain)
            bar.update()
        counts = run.counted(device)
        _zero_grads(chain)
        bar.update()
        for _ in range(iterations):
            f, b = run.timed(clock)
            _zero_grads(chain)
            for i in range(n):
                fwd[i].append(f[i])
                bwd[i].append(b[i])
            bar.update()
        static = static_bytes(chain, (x, y), optimizer)

    layers = []
    for i in range(n):
        sig = chain.signatures[i]
        shape, dtype = counts.shapes[i]
        layers.append(
            Layer.v1(
                name=chain.names[i],
                fwd=statistics.median(fwd[i]),
                bwd=statistics.median(bwd[i]),
                saved_bytes=counts.saved[i],
                fwd_work_bytes=counts.fwd_work[i],
                bwd_work_bytes=counts.bwd_work[i],
                signature=None if sig is None else f"{sig}|in={dtype}{list(shape)}",
            )
        )
    return Profile(
        name=name,
        device=link,
        static_bytes=static.total,
        layers=tuple(layers),
        source=_source(device, iterations, warmup, link_note, static.note),
    )
