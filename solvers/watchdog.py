"""A wall-clock watchdog for solver binaries that overrun their own time limit.

CBC (run by PuLP as a child process) checks its `-sec` limit only between
nodes of its search: at the root of a 32-layer model its cut loop ran 40 s
past a 17 s limit, and 355 s on a 120 s one. PuLP gives no handle on the
child, so the watchdog finds it among this process's children by name: at
the deadline it sends SIGINT (CBC then stops and writes its best plan), and
if the child is still there `kill_after` seconds later, SIGKILL (PuLP then
reports an error, which the caller turns into "no plan from the back-end").
Only Linux lists children in /proc; elsewhere the watchdog does nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field


def children_named(fragment: str, parent: int | None = None) -> list[int]:
    """PIDs of `parent`'s (default: this process's) children whose name holds `fragment`."""
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
        if len(fields) > 1 and int(fields[1]) == parent and fragment in name.lower():
            found.append(int(entry))
    return found


@dataclass
class Watch:
    """What the watchdog did: the signals it sent to some child (in order)."""

    sent: list[int] = field(default_factory=list)

    def signal_all(self, fragment: str, sig: int) -> None:
        for pid in children_named(fragment):
            with contextlib.suppress(OSError):  # it ended meanwhile
                os.kill(pid, sig)
                self.sent.append(sig)


@contextlib.contextmanager
def stop_children_after(
    fragment: str, seconds: float | None, kill_after: float = 2.0
) -> Iterator[Watch]:
    """Within the block, children named `fragment` get SIGINT after `seconds`, SIGKILL
    `kill_after` seconds later (None: no watchdog); the Watch says what was sent."""
    watch = Watch()
    if seconds is None:
        yield watch
        return
    start = max(0.0, seconds)
    timers = [
        threading.Timer(start, watch.signal_all, (fragment, signal.SIGINT)),
        threading.Timer(start + kill_after, watch.signal_all, (fragment, signal.SIGKILL)),
    ]
    for timer in timers:
        timer.daemon = True
        timer.start()
    try:
        yield watch
    finally:
        for timer in timers:
            timer.cancel()
