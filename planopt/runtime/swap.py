"""Copies of saved storages to host memory and back (the spec's D2H and H2D engines).

NOTE (one schedule, three engines): *when* a copy is enqueued, what it waits
for and where the compute side waits is written once, in `Copies`:

* a copy out is enqueued at the end of `F_i` on the D2H queue (FIFO);
* a copy back is enqueued at the issue of `B_{prefetch_at}` on the H2D queue
  (FIFO), after its own copy out;
* the compute side waits for a copy out only at `swap_wait` (`wait_out`), for
  a copy back only before a reader (`wait_back`: the start of `B_t`, a
  recompute block's base);
* a host buffer is reused only after its copy back was waited for.

An engine only says how a queue, a buffer and a wait are made:

* `CudaCopies`: two CUDA streams, CUDA events, pinned host buffers from a
  pool. Freeing a device storage whose copy out is still running is safe:
  `record_stream` makes the caching allocator hold the block until the copy
  stream is done with it, which is the spec's "freed at the later of the end
  of its copy out and the end of F_{i+1}".
* `ThreadCopies` (`planopt.runtime.threadcopies`): CPU with an emulated link,
  two host threads that copy and then wait out `latency + bytes / bandwidth`.
* `SyncCopies`: CPU without a link: copies that end when the call returns.

On CPU the host buffers are allocated inside `tracker.host_memory()`: they
are the same RAM, but they stand for the host side of a swap, which the cost
model does not count as device memory. Device buffers for a copy back are
allocated on the compute side when the copy back is enqueued, as the CUDA
allocator hands them out, so the tracker counts them from that instant.

`planopt.runtime.engines.copy_engine(device, link)` picks one (it imports
this module and `threadcopies`, which imports this one: the dependency runs
one way); only `CudaCopies` touches `torch.cuda`, and it refuses to start
without CUDA.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

import torch

from planopt.runtime.errors import CudaUnavailableError
from planopt.runtime.tracker import host_memory


class Direction(StrEnum):
    """The two copy queues of the spec."""

    D2H = "d2h"  # copy out
    H2D = "h2d"  # copy back


@dataclass(slots=True)
class HostCopy:
    """One layer's storages on the host; `done` marks the end of the copy out."""

    hosts: list[torch.Tensor]
    done: Any = None  # the engine's marker: a CUDA event, a thread job, None (synchronous)
    layer: int = -1


@dataclass(slots=True)
class DeviceCopy:
    """One layer's storages copied back; `done` marks the end of the copy back."""

    buffers: list[torch.Tensor]
    done: Any = None
    waited: bool = False
    nbytes: int = field(default=0)


Fill = Callable[[list[torch.Tensor]], None]


class CopyEngine(Protocol):
    def copy_out(self, views: list[torch.Tensor], layer: int = -1) -> HostCopy: ...
    def copy_back(
        self, copy: HostCopy, device: torch.device, fill: Fill | None = None
    ) -> DeviceCopy: ...
    def poll(self) -> None: ...
    def wait_out(self, copy: HostCopy) -> None: ...
    def wait_back(self, copy: DeviceCopy) -> None: ...
    def release(self, copy: HostCopy, back: DeviceCopy | None) -> None: ...
    def synchronize(self) -> None: ...
    def close(self) -> None: ...


class Copies:
    """The copy schedule of the spec, written once (see the module NOTE).

    Subclasses are adapters: `_host_buffers`, `_device_buffers`, `_enqueue`
    (one FIFO queue per direction; returns the copy's `done` marker),
    `_wait` (the compute side waits for a marker) and `_recycle`.
    """

    def copy_out(self, views: list[torch.Tensor], layer: int = -1) -> HostCopy:
        hosts = self._host_buffers([v.numel() for v in views])
        done = self._enqueue(Direction.D2H, hosts, views, None, layer)
        return HostCopy(hosts, done, layer)

    def copy_back(
        self, copy: HostCopy, device: torch.device, fill: Fill | None = None
    ) -> DeviceCopy:
        """Enqueue the copy back; `fill(buffers)` is called on the compute side once its
        device buffers exist (here at once; an engine may allocate them at the copy's start)."""
        buffers = self._device_buffers([h.numel() for h in copy.hosts], device)
        done = self._enqueue(Direction.H2D, buffers, copy.hosts, copy.done, copy.layer)
        if fill is not None:
            fill(buffers)
        return DeviceCopy(buffers, done, nbytes=sum(b.numel() for b in buffers))

    def poll(self) -> None:
        """The compute side passes a step boundary: an engine may allocate now what is due."""

    def wait_out(self, copy: HostCopy) -> None:
        self._wait(copy.done)

    def wait_back(self, copy: DeviceCopy) -> None:
        if copy.waited:
            return
        self._wait(copy.done)
        copy.waited = True

    def release(self, copy: HostCopy, back: DeviceCopy | None) -> None:
        # A host buffer may be reused by a later copy out only after its copy
        # back was consumed.
        if back is not None:
            self.wait_back(back)
        self._recycle(copy.hosts)

    def synchronize(self) -> None:
        """Return when every enqueued copy has ended."""

    def close(self) -> None:
        """Give back what the engine keeps across steps (threads, pinned buffers)."""

    # -- the adapter -----------------------------------------------------------

    def _host_buffers(self, sizes: list[int]) -> list[torch.Tensor]:
        with host_memory():  # host memory, though on CPU it is the same RAM
            return [torch.empty(n, dtype=torch.uint8) for n in sizes]

    def _device_buffers(self, sizes: list[int], device: torch.device) -> list[torch.Tensor]:
        return [torch.empty(n, dtype=torch.uint8, device=device) for n in sizes]

    def _enqueue(
        self,
        direction: Direction,
        dsts: list[torch.Tensor],
        srcs: list[torch.Tensor],
        after: Any,
        layer: int,
    ) -> Any:
        raise NotImplementedError

    def _wait(self, done: Any) -> None:
        raise NotImplementedError

    def _recycle(self, hosts: list[torch.Tensor]) -> None:
        return None


class SyncCopies(Copies):
    """Copies that end when the call returns (CPU without a link)."""

    streams = False

    def _enqueue(self, direction, dsts, srcs, after, layer) -> None:
        for dst, src in zip(dsts, srcs, strict=True):
            dst.copy_(src)
        return None

    def _wait(self, done: Any) -> None:
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


class CudaCopies(Copies):
    """Asynchronous copies on two dedicated CUDA streams (needs CUDA)."""

    streams = True

    def __init__(self, device: torch.device) -> None:
        if not torch.cuda.is_available():
            raise CudaUnavailableError(
                f"CudaCopies: swapping on {device} needs CUDA, but torch.cuda.is_available() "
                "is False (use a CPU device for synchronous copies)"
            )
        self.device = device
        self.queues = {
            Direction.D2H: torch.cuda.Stream(device),
            Direction.H2D: torch.cuda.Stream(device),
        }
        self.pool = PinnedPool()

    def _host_buffers(self, sizes: list[int]) -> list[torch.Tensor]:
        return [self.pool.get(n) for n in sizes]

    def _device_buffers(self, sizes: list[int], device: torch.device) -> list[torch.Tensor]:
        # Allocated on the copy-back stream (a block the compute stream just
        # freed may still be read by its queued kernels), then marked as used
        # by the compute stream, which reads them whenever the readers drop them.
        with torch.cuda.stream(self.queues[Direction.H2D]):
            buffers = super()._device_buffers(sizes, device)
        compute = torch.cuda.current_stream(self.device)
        for buf in buffers:
            buf.record_stream(compute)
        return buffers

    def _enqueue(self, direction, dsts, srcs, after, layer) -> torch.cuda.Event:
        # Starts after what the compute stream enqueued so far (the forward
        # that produced the storages), the previous copy of its queue (one
        # stream is one FIFO queue) and `after` (a copy back's copy out).
        stream = self.queues[direction]
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            stream.wait_event(ready)
            if after is not None:
                stream.wait_event(after)
            for dst, src in zip(dsts, srcs, strict=True):
                dst.copy_(src, non_blocking=True)
                if src.is_cuda:
                    src.record_stream(stream)
            done = torch.cuda.Event()
            done.record(stream)
        return done

    def _wait(self, done: torch.cuda.Event) -> None:
        torch.cuda.current_stream(self.device).wait_event(done)

    def _recycle(self, hosts: list[torch.Tensor]) -> None:
        for host in hosts:
            self.pool.put(host)

    def synchronize(self) -> None:
        for stream in self.queues.values():
            stream.synchronize()

    def close(self) -> None:
        self.pool.clear()
