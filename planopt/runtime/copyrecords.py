"""What a `ThreadCopies` engine did: each copy as it ran, each wait of the compute thread.

Kept apart from the engine (`planopt.runtime.threadcopies`), which fills
`records` and `waits` with them; tests and `experiments/bench_fidelity_time.py`
read them to check the spec's orderings and to time a step's stalls.
"""

from __future__ import annotations

from dataclasses import dataclass

from planopt.runtime.swap import Direction


@dataclass(frozen=True, slots=True)
class CopyRecord:
    """One copy as the engine ran it (`time.perf_counter` seconds)."""

    direction: Direction
    layer: int
    nbytes: int
    issued: str  # where the step was when the copy was enqueued (`F_3`, `B_5`)
    enqueued: float
    start: float  # the modelled start: max(enqueued, previous end, own copy out's end)
    modelled_end: float  # max(start + latency + nbytes / bandwidth, end of the real copy)
    end: float  # when the worker marked it done (released its sources)
    copy_seconds: float  # the real copy's own time

    @property
    def late(self) -> float:
        """Seconds the worker marked the copy done past its end (a late wake-up)."""
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
