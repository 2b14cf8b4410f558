"""Load for determinism checks: processes that keep the CPU busy while a block runs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def busy_cores(count: int = 2) -> Iterator[None]:
    """`count` processes spinning on the CPU for the duration of the block."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
