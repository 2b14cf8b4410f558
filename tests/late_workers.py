"""Copy workers that run late, as on a CPU-starved machine, deterministically.

`LateTime(late)` stands in for the `time` module of
`planopt.runtime.threadcopies` (`monkeypatch.setattr(threadcopies, "time",
LateTime(...))`): every sleep of a copy worker thread lasts `late` seconds
more, so a worker wakes up after the copy's modelled end, while the compute
thread keeps its own timing. `LateStart` (`LateStartCopies`) makes the workers
start every copy late. Memory must not depend on either: what the
cost model frees at a copy's end is gone when the compute thread next looks.
"""

from __future__ import annotations

import threading
import time

from planopt.runtime import hostcopies
from planopt.runtime.threadcopies import ThreadCopies


def on_worker() -> bool:
    return threading.current_thread().name.startswith("planopt-")


class LateTime:
    """The `time` module, except that a copy worker's sleeps last `late` s more."""

    def __init__(self, late: float) -> None:
        self.late = late

    def __getattr__(self, name: str):
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds + self.late if on_worker() else seconds)


class LateStart:
    """Mixin for a `ThreadCopies`: its workers start each copy `start_late` s late."""

    start_late = 0.02

    def _run(self, job, previous_end: float) -> float:
        time.sleep(self.start_late)
        return super()._run(job, previous_end)


class LateStartCopies(LateStart, ThreadCopies):
    """ThreadCopies whose workers start each copy `start` seconds late."""

    def __init__(self, link, start: float) -> None:
        super().__init__(link)
        self.start_late = start


def start_apply_copies_late(monkeypatch, start: float) -> None:
    """Make `apply`'s engine (`hostcopies.HiddenThreadCopies`) start each copy `start`
    seconds late, for the rest of the test."""
    late = type(
        "LateHiddenThreadCopies",
        (LateStart, hostcopies.HiddenThreadCopies),
        {"start_late": start},
    )
    monkeypatch.setattr(hostcopies, "HiddenThreadCopies", late)
