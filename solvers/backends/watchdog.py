"""A watchdog for solver binaries that overrun their own time limit.

CBC (run by PuLP as a child process) checks its `-sec` limit only between
nodes of its search: at the root of a 32-layer model its cut loop ran 40 s
past a 17 s limit, and 355 s on a 120 s one. PuLP gives no handle on the
child, so the watchdog finds it among this process's children by name: at
the deadline it sends SIGINT (CBC then stops and writes its best plan), and
if the child is still there `kill_after` seconds later, SIGKILL (PuLP then
reports an error, which the caller turns into "no plan from the back-end").
Only Linux lists children in /proc; elsewhere the watchdog does nothing.

The watchdog waits on a `Clock` (the wall clock by default), so tests drive
it through its states without timing anything.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol


def children_named(fragment: str, parent: int | None = None) -> list[int]:
    """PIDs of `parent`'s (default: this process's) live children whose name holds `fragment`
    (a zombie, which has exited and waits to be reaped, is not one)."""
    parent = os.getpid() if parent is None else parent
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        name = stat[stat.find("(") + 1 : stat.rfind(")")]
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) < 2 or fields[0] == "Z":
            continue
        if int(fields[1]) == parent and fragment in name.lower():
            found.append(int(entry))
    return found


class Clock(Protocol):
    """What the watchdog waits on."""

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        """Wait `seconds`; True when `stop` was set first (the block ended)."""
        ...


class WallClock:
    """The real clock: wait on the event with a timeout."""

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        return stop.wait(seconds)


WALL_CLOCK = WallClock()


@dataclass
class Watch:
    """What the watchdog did: the signals it sent to some child, in order."""

    sent: list[int] = field(default_factory=list)

    def signal_all(self, fragment: str, sig: int) -> None:
        for pid in children_named(fragment):
            with contextlib.suppress(OSError):  # it ended meanwhile
                os.kill(pid, sig)
                self.sent.append(sig)


@contextlib.contextmanager
def stop_children_after(
    fragment: str,
    seconds: float | None,
    kill_after: float = 2.0,
    *,
    clock: Clock = WALL_CLOCK,
) -> Iterator[Watch]:
    """Within the block, children named `fragment` get SIGINT after `seconds`, SIGKILL
    `kill_after` seconds later (None: no watchdog); the Watch says what was sent.
    Nothing is sent once the block has ended (the watchdog is joined on exit)."""
    watch = Watch()
    if seconds is None:
        yield watch
        return
    stop = threading.Event()

    def run() -> None:
        if clock.wait(max(0.0, seconds), stop):
            return
        watch.signal_all(fragment, signal.SIGINT)
        if clock.wait(kill_after, stop):
            return
        watch.signal_all(fragment, signal.SIGKILL)

    thread = threading.Thread(target=run, name="planopt-watchdog", daemon=True)
    thread.start()
    try:
        yield watch
    finally:
        stop.set()
        thread.join()
