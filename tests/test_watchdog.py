"""The watchdog that stops solver binaries overrunning their own time limit."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from solvers.watchdog import children_named, stop_children_after

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")


def test_children_are_found_by_name_and_only_children():
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert child.pid in children_named("sleep")
        assert child.pid not in children_named("cbc")
        assert children_named("sleep", parent=child.pid) == []
    finally:
        child.kill()
        child.wait()


def test_a_child_past_its_deadline_is_interrupted():
    # The return code says the child died of the signal, not of its 30 s.
    with stop_children_after("sleep", 0.3) as watch:
        done = subprocess.run(["sleep", "30"], check=False)
    assert done.returncode == -signal.SIGINT
    assert watch.sent == [signal.SIGINT]


def test_a_child_that_ignores_sigint_is_killed():
    script = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(30)"
    with stop_children_after("python", 0.3, kill_after=0.5) as watch:
        done = subprocess.run([sys.executable, "-c", script], check=False)
    assert done.returncode == -signal.SIGKILL
    assert watch.sent == [signal.SIGINT, signal.SIGKILL]


def test_no_deadline_and_finished_blocks_leave_children_alone():
    with stop_children_after("sleep", None) as watch:
        assert subprocess.run(["sleep", "0.2"], check=False).returncode == 0
    assert watch.sent == []
    with stop_children_after("sleep", 0.5) as watch:
        pass
    child = subprocess.Popen(["sleep", "1.5"])  # started after the block: the timers are off
    assert child.wait() == 0
    assert watch.sent == []
