"""The spec's copy engines on host threads: rehearse a plan on CPU with an emulated link.

`ThreadCopies(link)` runs a D2H and an H2D worker thread, each taking its
queue's copies one at a time in FIFO order. A copy starts at the latest of
its enqueue, the end of the previous copy of its queue and (a copy back)
the end of its own copy out, as the spec says; it does the real copy, then
waits until `start + transfer_latency + bytes / bandwidth` before it is
marked done. The compute thread waits on that mark exactly where the
schedule (`planopt.runtime.swap.Copies`) makes it wait, so a plan's stalls
on CPU are those the simulator predicts for the link.

NOTE (start instants): a copy's start is computed from the recorded
instants (enqueue, the previous end, its copy out's end), not read when the
worker wakes, so a late wake-up on a loaded machine delays only that copy's
real work, never the modelled end of the copies queued behind it. A real
copy slower than the link (a link faster than memory) ends late; `records`
shows it (`late`).

NOTE (memory): buffers are allocated on the compute thread (host buffers
inside `host_memory()`, so the live-storage tracker files them outside the
device peak; device buffers for a copy back when it is enqueued). A worker
holds the source of a copy out until the copy's modelled end, so a swapped
storage is freed at the later of the end of its copy out and the end of its
forward use, the spec's instant. Its release is then seen on the worker
thread, which is why the tracker takes a lock.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from dataclasses import dataclass

import torch

from planopt.profile import Device
from planopt.runtime.swap import Copies, Direction
from planopt.runtime.tracker import current_where


@dataclass(frozen=True, slots=True)
class CopyRecord:
    """One copy as the engine ran it (`time.perf_counter` seconds)."""

    direction: Direction
    layer: int
    nbytes: int
    issued: str  # where the step was when the copy was enqueued (`F_3`, `B_5`)
    enqueued: float
    start: float  # the modelled start: max(enqueued, previous end, own copy out's end)
    modelled_end: float  # start + latency + nbytes / bandwidth
    end: float  # when it was marked done (>= modelled_end)
    copy_seconds: float  # the real copy's own time

    @property
    def late(self) -> float:
        """Seconds past the modelled end (worker wake-up, or a copy slower than the link)."""
        return self.end - self.modelled_end


@dataclass(frozen=True, slots=True)
class WaitRecord:
    """The compute thread waited for a copy (`where` the step was, e.g. `F_3`, `B_5`)."""

    direction: Direction
    layer: int
    where: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


class _Job:
    __slots__ = (
        "after",
        "direction",
        "done",
        "dsts",
        "end",
        "enqueued",
        "issued",
        "layer",
        "nbytes",
        "srcs",
    )

    def __init__(self, direction, dsts, srcs, after, layer) -> None:
        self.direction = direction
        self.dsts = dsts
        self.srcs = srcs
        self.after: _Job | None = after
        self.layer = layer
        self.nbytes = sum(d.numel() * d.element_size() for d in dsts)
        self.issued = current_where()
        self.enqueued = time.perf_counter()
        self.end = math.nan
        self.done = threading.Event()


class ThreadCopies(Copies):
    """A D2H and an H2D worker thread over an emulated link (see the module doc)."""

    streams = False

    def __init__(self, link: Device) -> None:
        if not isinstance(link, Device):
            raise TypeError(f"link must be a planopt.Device, got {type(link).__name__}")
        self.link = link
        self.records: list[CopyRecord] = []
        self.waits: list[WaitRecord] = []
        self._queues: dict[Direction, queue.Queue] = {}
        self._threads: list[threading.Thread] = []
        self._error: BaseException | None = None

    def duration(self, direction: Direction, nbytes: int) -> float:
        """The link's time for one copy: `latency + bytes / bandwidth`."""
        bw = self.link.d2h_bandwidth if direction is Direction.D2H else self.link.h2d_bandwidth
        return self.link.transfer_latency + nbytes / bw

    def clear_records(self) -> None:
        self.records.clear()
        self.waits.clear()

    # -- the adapter ---------------------------------------------------------------

    def _enqueue(self, direction, dsts, srcs, after, layer) -> _Job:
        self._check()
        if not self._threads:
            self._start()
        job = _Job(direction, list(dsts), list(srcs), after, layer)
        self._queues[direction].put(job)
        return job

    def _wait(self, job: _Job | None) -> None:
        if job is None:
            return
        if not job.done.is_set():
            start = time.perf_counter()
            job.done.wait()
            self.waits.append(
                WaitRecord(job.direction, job.layer, current_where(), start, time.perf_counter())
            )
        self._check()

    def synchronize(self) -> None:
        for q in self._queues.values():
            q.join()
        self._check()

    def close(self) -> None:
        for q in self._queues.values():
            q.put(None)
        for thread in self._threads:
            thread.join()
        self._queues.clear()
        self._threads.clear()

    # -- the workers -----------------------------------------------------------------

    def _start(self) -> None:
        for direction in Direction:
            q: queue.Queue = queue.Queue()
            self._queues[direction] = q
            thread = threading.Thread(
                target=self._work, args=(q,), name=f"planopt-{direction.value}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _work(self, q: queue.Queue) -> None:
        previous_end = -math.inf
        while True:
            job = q.get()
            if job is None:
                q.task_done()
                return
            try:
                previous_end = self._run(job, previous_end)
            except BaseException as exc:  # reported to the compute thread at its next call
                self._error = exc
                job.end = time.perf_counter()
                job.done.set()
            finally:
                q.task_done()

    def _run(self, job: _Job, previous_end: float) -> float:
        if job.after is not None:
            job.after.done.wait()
        start = max(
            job.enqueued, previous_end, job.after.end if job.after is not None else -math.inf
        )
        began = time.perf_counter()
        with torch.no_grad():
            for dst, src in zip(job.dsts, job.srcs, strict=True):
                dst.copy_(src)
        copied = time.perf_counter()
        modelled_end = start + self.duration(job.direction, job.nbytes)
        remaining = modelled_end - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        # The sources are released at the copy's end (a copy out's storage may
        # be its last holder: freed now, as the spec frees it).
        job.dsts = job.srcs = []
        job.end = time.perf_counter()
        self.records.append(
            CopyRecord(
                job.direction,
                job.layer,
                job.nbytes,
                job.issued,
                job.enqueued,
                start,
                modelled_end,
                job.end,
                copied - began,
            )
        )
        job.done.set()
        return job.end

    def _check(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(
                f"ThreadCopies: a copy failed on its worker thread: {error!r}"
            ) from error
