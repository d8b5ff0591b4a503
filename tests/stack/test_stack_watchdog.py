"""The watchdog `orchestrator up` runs: it stops what a killed process started, and nothing after a
clean stop. Real processes, checked in the process table."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from test_stack_up import alive

# A stand-in for `up`: starts the watchdog over itself, then a child with a grandchild of its own
# (as a raylet has workers), prints their pids, and either waits to be killed or stops cleanly.
PARENT = """
import subprocess, sys, time
from orchestrator.controlplane.watchdog import start_watchdog, stop_watchdog
guard = start_watchdog()
shell = ["sh", "-c", "sleep 60 & echo $!; wait"]
child = subprocess.Popen(shell, stdout=subprocess.PIPE, text=True)
grandchild = int(child.stdout.readline())
print(child.pid, grandchild, guard.pid, flush=True)
if sys.argv[1] == "clean":
    stop_watchdog(guard)
    sys.exit(0)
time.sleep(60)
"""


@contextmanager
def parent(mode: str) -> Iterator[tuple[subprocess.Popen[str], list[int]]]:
    process = subprocess.Popen(
        [sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    pids = [int(pid) for pid in process.stdout.readline().split()]
    try:
        yield process, pids
    finally:
        for pid in [process.pid, *pids]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        process.wait(10)


def until_gone(pids: list[int], timeout_s: float) -> float:
    started = time.monotonic()
    while left := [pid for pid in pids if alive(pid)]:
        assert time.monotonic() - started < timeout_s, f"still running: {left}"
        time.sleep(0.1)
    return time.monotonic() - started


def test_a_killed_process_s_children_and_grandchildren_are_stopped_and_the_watchdog_exits() -> None:
    with parent("killed") as (process, (child, grandchild, watchdog)):
        time.sleep(1.0)  # the watchdog has seen them (it looks every 0.5 s)
        assert alive(child) and alive(grandchild) and alive(watchdog)
        process.kill()
        process.wait(10)
        until_gone([child, grandchild, watchdog], 8.0)


def test_after_a_clean_stop_the_watchdog_is_gone_and_touches_nothing() -> None:
    with parent("clean") as (process, (child, grandchild, watchdog)):
        assert process.wait(10) == 0
        until_gone([watchdog], 5.0)
        time.sleep(1.0)
        assert alive(child) and alive(grandchild)
