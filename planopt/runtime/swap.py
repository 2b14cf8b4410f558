"""Copies of saved storages to host memory and back (the spec's D2H and H2D engines).

Two engines with one interface:

* `CudaCopies`: a dedicated copy-out stream and a copy-back stream, pinned
  host buffers from a pool, events for every copy. The compute stream only
  waits where the spec makes it wait (`swap_wait`, the start of `B_t`, a
  recompute block's base). Freeing a device storage whose copy out is still
  running is safe: `record_stream` makes the caching allocator hold the block
  until the copy stream is done with it, which is the spec's "freed at the
  later of the end of its copy out and the end of F_{i+1}".
* `SyncCopies`: any other device (CPU): the same calls, copies to ordinary
  host tensors that end when the call returns, no streams, no events. The
  host tensors are allocated inside `tracker.host_memory()`: on CPU they
  are the same RAM, but they stand for the host side of a swap, which the
  cost model does not count as device memory.

`copy_engine(device)` picks one; only `CudaCopies` touches `torch.cuda`, and it
refuses to start without CUDA.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from planopt.runtime.tracker import host_memory


@dataclass(slots=True)
class HostCopy:
    """One layer's storages on the host; `done` marks the end of the copy out (CUDA)."""

    hosts: list[torch.Tensor]
    done: Any = None  # torch.cuda.Event on CUDA


@dataclass(slots=True)
class DeviceCopy:
    """One layer's storages copied back; `done` marks the end of the copy back (CUDA)."""

    buffers: list[torch.Tensor]
    done: Any = None
    waited: bool = False
    nbytes: int = field(default=0)


class CopyEngine(Protocol):
    def copy_out(self, views: list[torch.Tensor]) -> HostCopy: ...
    def copy_back(self, copy: HostCopy, device: torch.device) -> DeviceCopy: ...
    def wait_out(self, copy: HostCopy) -> None: ...
    def wait_back(self, copy: DeviceCopy) -> None: ...
    def release(self, copy: HostCopy, back: DeviceCopy | None) -> None: ...


class SyncCopies:
    """Copies that end when the call returns (CPU, or any device without streams)."""

    streams = False

    def copy_out(self, views: list[torch.Tensor]) -> HostCopy:
        with host_memory():  # host memory, though on CPU it is the same RAM
            hosts = [torch.empty(v.numel(), dtype=torch.uint8) for v in views]
        for host, view in zip(hosts, views, strict=True):
            host.copy_(view)
        return HostCopy(hosts)

    def copy_back(self, copy: HostCopy, device: torch.device) -> DeviceCopy:
        buffers = [torch.empty(h.numel(), dtype=torch.uint8, device=device) for h in copy.hosts]
        for buf, host in zip(buffers, copy.hosts, strict=True):
            buf.copy_(host)
        return DeviceCopy(buffers, nbytes=sum(b.numel() for b in buffers))

    def wait_out(self, copy: HostCopy) -> None:
        return None

    def wait_back(self, copy: DeviceCopy) -> None:
        copy.waited = True

    def release(self, copy: HostCopy, back: DeviceCopy | None) -> None:
        return None


class PinnedPool:
    """Pinned host buffers by size, reused across steps (pinning is slow)."""

    def __init__(self) -> None:
        self._free: dict[int, list[torch.Tensor]] = defaultdict(list)

    def get(self, nbytes: int) -> torch.Tensor:
        free = self._free.get(nbytes)
        if free:
            return free.pop()
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def put(self, buffer: torch.Tensor) -> None:
        self._free[buffer.numel()].append(buffer)

    def clear(self) -> None:
        self._free.clear()

    @property
    def nbytes(self) -> int:
        return sum(b.numel() for bufs in self._free.values() for b in bufs)


class CudaCopies:
    """Asynchronous copies on two dedicated CUDA streams (needs CUDA)."""

    streams = True

    def __init__(self, device: torch.device) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"CudaCopies: swapping on {device} needs CUDA, but torch.cuda.is_available() "
                "is False (use a CPU device for synchronous copies)"
            )
        self.device = device
        self.d2h = torch.cuda.Stream(device)
        self.h2d = torch.cuda.Stream(device)
        self.pool = PinnedPool()

    def copy_out(self, views: list[torch.Tensor]) -> HostCopy:
        # The copy out starts when the forward that produced the storages ends
        # (an event on the compute stream) and the previous copy out ended
        # (the d2h stream is one FIFO queue).
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(self.device))
        hosts = [self.pool.get(v.numel()) for v in views]
        with torch.cuda.stream(self.d2h):
            self.d2h.wait_event(ready)
            for host, view in zip(hosts, views, strict=True):
                host.copy_(view, non_blocking=True)
                view.record_stream(self.d2h)
            done = torch.cuda.Event()
            done.record(self.d2h)
        return HostCopy(hosts, done)

    def copy_back(self, copy: HostCopy, device: torch.device) -> DeviceCopy:
        # Starts when enqueued, after the previous copy back (FIFO h2d stream)
        # and after this storage's own copy out.
        with torch.cuda.stream(self.h2d):
            self.h2d.wait_event(copy.done)
            buffers = [torch.empty(h.numel(), dtype=torch.uint8, device=device) for h in copy.hosts]
            for buf, host in zip(buffers, copy.hosts, strict=True):
                buf.copy_(host, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.h2d)
        # Allocated on the copy stream, used on the compute stream: the
        # allocator must not reuse the blocks before the compute work that
        # reads them is done, whenever the readers drop them.
        compute = torch.cuda.current_stream(self.device)
        for buf in buffers:
            buf.record_stream(compute)
        return DeviceCopy(buffers, done, nbytes=sum(b.numel() for b in buffers))

    def wait_out(self, copy: HostCopy) -> None:
        torch.cuda.current_stream(self.device).wait_event(copy.done)

    def wait_back(self, copy: DeviceCopy) -> None:
        if copy.waited:
            return
        torch.cuda.current_stream(self.device).wait_event(copy.done)
        copy.waited = True

    def release(self, copy: HostCopy, back: DeviceCopy | None) -> None:
        # A host buffer may be reused by a later copy out only after its copy
        # back was consumed: waiting on the compute stream orders the two.
        if back is not None:
            self.wait_back(back)
        for host in copy.hosts:
            self.pool.put(host)


def copy_engine(device: torch.device) -> CopyEngine:
    """`CudaCopies` for a CUDA device, `SyncCopies` for anything else."""
    if device.type == "cuda":
        return CudaCopies(device)
    return SyncCopies()
