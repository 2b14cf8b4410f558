"""The spec's copy engines on host threads: rehearse a plan on CPU with an emulated link.

`ThreadCopies(link)` runs a D2H and an H2D worker thread, each taking its queue's copies
one at a time in FIFO order. A copy starts at the latest of its enqueue, the end of the
previous copy of its queue and (a copy back) the end of its own copy out, as the spec
says; the worker does the real copy, then waits out `start + transfer_latency + bytes /
bandwidth` before it releases the copy's sources and marks it done. The compute thread
waits for a copy exactly where the schedule (`planopt.runtime.swap.Copies`) makes it
wait, until the copy's end, so a plan's stalls on CPU are those the simulator predicts.

NOTE (modelled instants): a copy's end is `max(modelled end, end of the real copy)`,
computed when the real copy is done; the next copy of the queue starts from it, and a
waiting compute thread sleeps until it itself. Nothing on the critical path waits for a
worker to wake up: on a loaded machine a sleeping thread wakes milliseconds late, and
chaining those wake-ups made copies end 5-10 ms late each on the 2-core machine of
`experiments/bench_fidelity_time.py`. `records` keeps, per copy, the modelled start and
end and when the worker really marked it done (`late`).

NOTE (clocks): `clock="wall"` (default) runs the link on `time.perf_counter`: on a shared
machine the compute thread's wall time stretches with the load while the copies do not.
`clock="thread"` runs it on the compute thread's own clock, its CPU time
(`time.thread_time`) plus its waits: a compute thread that waits sleeps the modelled
remainder and its clock advances by exactly that, so the schedule is the simulator's
from a profile timed on the same clock (`profile(..., timer="thread")`) whatever the
load. Records are on the engine's clock; `late` means something on the wall clock only.

NOTE (memory): buffers are allocated on the compute thread (host buffers inside
`host_memory()`, outside the device peak). A copy back given a `fill` (`apply`'s) gets
its device buffers at its modelled *start*, as the cost model allocates them, at the
compute thread's first `poll()` (step issue and end, each unpack) or wait from then on;
without `fill` (the executor) when enqueued, as `CudaCopies` does. A copy's destinations
are their owners' (the host copy, a copy back's readers): the worker drops them once
copied. A copy out's sources (a swapped storage's last holder, maybe) go at the copy's
end, the spec's instant, dropped by whichever thread is there first: the worker waking
up, or the compute thread at a `poll()` or wait past that end, which makes the real copy
itself if a starved worker has not started it (`claim`). So no worker, however late,
holds what the cost model has freed once the compute thread looks again (one waking late
made the executor measure a tiny ResNet 6.1% over its prediction on a loaded machine). A
release may run on a worker thread, which is why the tracker takes a lock.
"""

from __future__ import annotations

import math
import queue
import threading
import time

import torch
from torch.utils._mode_utils import no_dispatch

from planopt.profile import Device
from planopt.runtime.copyrecords import CopyRecord, WaitRecord
from planopt.runtime.errors import RuntimeOptionError
from planopt.runtime.swap import Copies, DeviceCopy, Direction, Fill, HostCopy
from planopt.runtime.tracker import current_where

CLOCKS = ("wall", "thread")


class _Job:
    __slots__ = (
        "after",
        "allocated",
        "claim",
        "copied",
        "copy_seconds",
        "direction",
        "done",
        "dsts",
        "end",
        "enqueued",
        "issued",
        "layer",
        "modelled_end",
        "nbytes",
        "pending",
        "prev",
        "srcs",
        "start",
        "startable",
    )

    def __init__(self, direction, dsts, srcs, after, layer, enqueued: float) -> None:
        self.direction = direction
        self.dsts = dsts
        self.srcs = srcs
        self.after: _Job | None = after
        self.layer = layer
        self.nbytes = sum(d.numel() * d.element_size() for d in dsts)
        self.issued = current_where()
        self.enqueued = enqueued
        self.start = self.modelled_end = self.end = self.copy_seconds = math.nan
        self.claim = threading.Lock()  # who makes the real copy (module NOTE on memory)
        self.copied = threading.Event()  # the real copy is done; `modelled_end` is known
        self.done = threading.Event()  # the worker released the sources
        # A copy back whose device buffers the compute thread allocates at its start:
        # (sizes, device, fill) until then; the worker waits for `allocated`.
        self.pending: tuple[list[int], torch.device, Fill] | None = None
        # The copy before it on its queue, until it is done (then None: no chain of jobs
        # across steps).
        self.prev: _Job | None = None
        self.startable = threading.Event()  # `start` is known
        self.allocated = threading.Event()
        self.allocated.set()


class ThreadCopies(Copies):
    """A D2H and an H2D worker thread over an emulated link (see the module doc)."""

    streams = False

    def __init__(self, link: Device, clock: str = "wall") -> None:
        if not isinstance(link, Device):
            raise RuntimeOptionError(f"link must be a planopt.Device, got {type(link).__name__}")
        if clock not in CLOCKS:
            raise RuntimeOptionError(f"clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
        self.link = link
        self.clock = clock
        self._waited = 0.0  # the compute thread's waits so far (clock "thread")
        self.records: list[CopyRecord] = []
        self.waits: list[WaitRecord] = []
        self._queues: dict[Direction, queue.Queue] = {}
        self._threads: list[threading.Thread] = []
        self._error: BaseException | None = None
        self._outs: list[_Job] = []  # copies out whose sources are not yet released
        self._backs: list[_Job] = []  # copies back whose buffers are not yet allocated (FIFO)
        self._last: dict[Direction, _Job | None] = dict.fromkeys(Direction)

    def duration(self, direction: Direction, nbytes: int) -> float:
        """The link's time for one copy: `latency + bytes / bandwidth`."""
        bw = self.link.d2h_bandwidth if direction is Direction.D2H else self.link.h2d_bandwidth
        return self.link.transfer_latency + nbytes / bw

    def now(self) -> float:
        """The engine's clock, read on the compute thread (see the module NOTE on clocks)."""
        if self.clock == "wall":
            return time.perf_counter()
        return time.thread_time() + self._waited

    def clear_records(self) -> None:
        self.records.clear()
        self.waits.clear()

    # -- the adapter ---------------------------------------------------------------

    def _enqueue(self, direction, dsts, srcs, after, layer) -> _Job:
        self._check()
        if not self._threads:
            self._start()
        job = _Job(direction, list(dsts), list(srcs), after, layer, self.now())
        job.prev, self._last[direction] = self._last[direction], job
        if direction is Direction.D2H:
            self._outs = [j for j in self._outs if not j.done.is_set()]
            self._outs.append(job)
        self._queues[direction].put(job)
        return job

    def copy_back(
        self, copy: HostCopy, device: torch.device, fill: Fill | None = None
    ) -> DeviceCopy:
        """With `fill`: the device buffers are allocated at the copy's start (see the
        module NOTE on memory), then handed to `fill` on the compute thread."""
        if fill is None:
            return super().copy_back(copy, device)
        sizes = [h.numel() for h in copy.hosts]
        self._check()
        if not self._threads:
            self._start()
        job = _Job(Direction.H2D, [], list(copy.hosts), copy.done, copy.layer, self.now())
        job.nbytes = sum(sizes)
        job.pending = (sizes, device, fill)
        job.allocated.clear()
        job.prev, self._last[Direction.H2D] = self._last[Direction.H2D], job
        self._backs.append(job)
        self._queues[Direction.H2D].put(job)
        self.poll()
        return DeviceCopy([], job, nbytes=job.nbytes)

    def poll(self) -> None:
        """Release the copies out that have ended by now; allocate the buffers of the
        copies back that have started by now."""
        self._release_ended(self.now())
        while self._backs:
            job = self._backs[0]
            start = self._start_of(job)
            if start is None or start > self.now():
                return
            self._allocate(job)

    @staticmethod
    def _start_of(job: _Job) -> float | None:
        """The copy's modelled start, once the copies it follows have known ends
        (the worker's own formula; it may not have reached the job yet)."""
        prev = job.prev  # read first: it is cleared only once `start` is known
        if job.startable.is_set():
            return job.start
        ends = [job.enqueued]
        for before in (prev, job.after):
            if before is not None:
                if not before.copied.is_set():
                    return None
                ends.append(before.modelled_end)
        return max(ends)

    def _allocate(self, job: _Job) -> None:
        """The compute thread allocates `job`'s buffers at its start (blocking until then)."""
        while self._backs and self._backs[0] is not job:
            self._allocate(self._backs[0])  # FIFO: an earlier copy back starts first
        start = self._start_of(job)
        if start is None:
            job.startable.wait()
            start = job.start
        if self.clock == "wall":
            remaining = start - time.perf_counter()
            if remaining > 0:
                time.sleep(remaining)
        # The spec frees a copy out's sources at its end, before an allocation at
        # the same instant: those that ended by the start go first.
        self._release_ended(start)
        sizes, device, fill = job.pending
        job.pending = None
        job.dsts = self._device_buffers(sizes, device)
        self._backs.remove(job)
        fill(job.dsts)
        job.allocated.set()

    def _release_ended(self, now: float) -> None:
        """Drop, on the compute thread, the sources of the copies out that end by `now`
        (see the module NOTE on memory). A copy whose link time is over but whose real
        copy a starved worker has not made yet is waited for first."""
        ended = 0
        for out in self._outs:
            start = self._start_of(out)
            if start is None or start + self.duration(Direction.D2H, out.nbytes) > now:
                break  # FIFO: the copies behind it end later still
            if out.claim.acquire(blocking=False):
                self._copy_out_here(out, start)  # the worker has not started it
            else:
                out.copied.wait()  # the worker is copying it
            out.srcs = []  # the worker may do the same on waking: either frees them
            ended += 1
        del self._outs[:ended]

    def _copy_out_here(self, job: _Job, start: float) -> None:
        """A copy out past its link's end no (starved) worker started: made here, unseen."""
        job.start = start
        job.startable.set()
        began = time.perf_counter()
        try:
            with no_dispatch():
                _copy(job.dsts, job.srcs)
        finally:  # its worker waits for `copied`, even after a failed copy (raised here)
            job.dsts = []
            job.copy_seconds = time.perf_counter() - began
            end = start + self.duration(job.direction, job.nbytes)
            job.modelled_end = max(end, time.perf_counter()) if self.clock == "wall" else end
            job.copied.set()

    def _wait(self, job: _Job | None) -> None:
        if job is None:
            return
        if job in self._backs:
            self._allocate(job)
        start = self.now()
        if not job.copied.is_set() or job.modelled_end > start:
            job.copied.wait()  # the data itself
            if self.clock == "wall":
                remaining = job.modelled_end - time.perf_counter()
                if remaining > 0:
                    time.sleep(remaining)
                end = time.perf_counter()
            else:
                # The compute thread's clock stood still while it was blocked;
                # it advances by the modelled remainder, slept in wall time.
                remaining = max(0.0, job.modelled_end - start)
                time.sleep(remaining)
                self._waited += remaining
                end = start + remaining
            self.waits.append(WaitRecord(job.direction, job.layer, current_where(), start, end))
        self._check()
        self.poll()

    def synchronize(self) -> None:
        while self._backs:
            self._allocate(self._backs[0])
        for q in self._queues.values():
            q.join()
        self._check()

    def close(self) -> None:
        for job in self._backs:  # never waited for: nothing to copy into
            job.pending = None
            job.srcs = []
            job.allocated.set()
        self._backs.clear()
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
                job.modelled_end = job.end = time.perf_counter()
                job.startable.set()
                job.copied.set()
                job.done.set()
            finally:
                q.task_done()

    def _run(self, job: _Job, previous_end: float) -> float:
        after = job.after
        if after is not None:
            after.copied.wait()
        if not job.claim.acquire(blocking=False):  # the compute thread copied it
            job.copied.wait()
            return self._finish(job, -math.inf)
        job.start = max(job.enqueued, previous_end, after.modelled_end if after else -math.inf)
        job.startable.set()
        job.allocated.wait()  # a copy back's buffers, allocated at its start
        began = time.perf_counter()
        _copy(job.dsts, job.srcs)
        # The destinations are their owners' (a copy out's host buffers, a copy back's
        # readers): a worker that wakes up late must not hold them (module NOTE on memory).
        job.dsts = []
        copied = time.perf_counter()
        job.copy_seconds = copied - began
        duration = self.duration(job.direction, job.nbytes)
        if self.clock == "wall":
            job.modelled_end = max(job.start + duration, copied)
            release_at = job.modelled_end
        else:  # the end is on the compute thread's clock; release after the link's time
            job.modelled_end = job.start + duration
            release_at = began + duration
        job.copied.set()
        return self._finish(job, release_at)

    def _finish(self, job: _Job, release_at: float) -> float:
        """The worker's end of a copy: release the sources at `release_at`, record it."""
        remaining = release_at - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        # The sources are released at the copy's end (a copy out's storage may
        # be its last holder: freed now, as the spec frees it), unless the compute
        # thread, past that end first, released them already.
        job.srcs, job.prev = [], None  # `prev`: no chain of jobs across steps
        job.end = time.perf_counter()
        self.records.append(
            CopyRecord(
                job.direction,
                job.layer,
                job.nbytes,
                job.issued,
                job.enqueued,
                job.start,
                job.modelled_end,
                job.end,
                job.copy_seconds,
            )
        )
        job.done.set()
        return job.modelled_end

    def _check(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(
                f"ThreadCopies: a copy failed on its worker thread: {error!r}"
            ) from error


def _copy(dsts: list[torch.Tensor], srcs: list[torch.Tensor]) -> None:
    """The real copy, in a frame of its own: no local of the worker outlives it."""
    with torch.no_grad():
        for dst, src in zip(dsts, srcs, strict=True):
            dst.copy_(src)
