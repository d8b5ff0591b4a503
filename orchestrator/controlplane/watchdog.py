"""A watchdog that stops the Ray nodes a process started when that process dies without doing so.

`orchestrator up` and a `control-plane` with a local cluster stop every process they started on
Ctrl-C or SIGTERM, but `kill -9` (or the OOM killer) gives them no chance: Ray's GCS, raylets and
workers would run on, orphaned. So `lifetime.ray_session` starts this small process first. It
notes the parent's descendants (by parent pid, with each one's start time, so a reused pid is
never taken for one of them) every `poll_s`; once the parent is gone it sends SIGTERM to those
still running and to their children, then SIGKILL to any left after `grace_s`. A clean stop ends
the watchdog before its parent exits, so it only ever acts after a crash.

Run as `python -m orchestrator.controlplane.watchdog PID`; it imports nothing heavy (the package
`__init__` imports nothing), so it starts in a blink.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

DEFAULT_POLL_S: Final = 0.5
DEFAULT_GRACE_S: Final = 3.0
_STOP_WAIT_S: Final = 5.0
_PROC: Final = Path("/proc")

# pid -> its start time (clock ticks since boot, /proc/PID/stat field 22): together, one process.
Processes = dict[int, int]


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, start time, state) of a live process; None when it is gone or a zombie."""
    try:
        fields = (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    state, parent, start = fields[0], int(fields[1]), int(fields[19])
    return None if state in ("Z", "X") else (parent, start, state)


def _process_table() -> dict[int, tuple[int, int]]:
    """Every live process: pid -> (parent pid, start time)."""
    table = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            table[int(entry.name)] = (stat[0], stat[1])
    return table


def descendants(roots: Mapping[int, int], exclude: int) -> Processes:
    """The live descendants of `roots` (pid -> start time, the roots themselves when still the same
    processes), without `exclude` (the watchdog); children are found through live parents only."""
    table = _process_table()
    found: Processes = {
        pid: start for pid, start in roots.items() if table.get(pid, (0, -1))[1] == start
    }
    todo = list(found)
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found and child != exclude:
                found[child] = table[child][1]
                todo.append(child)
    found.pop(exclude, None)
    return found


def _signal_all(processes: Mapping[int, int], signum: signal.Signals) -> None:
    for pid, start in processes.items():
        stat = _stat(pid)
        if stat is not None and stat[1] == start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)


def _still_running(processes: Mapping[int, int]) -> Processes:
    return {pid: start for pid, start in processes.items() if (s := _stat(pid)) and s[1] == start}


def watch(parent: int, *, poll_s: float = DEFAULT_POLL_S, grace_s: float = DEFAULT_GRACE_S) -> int:
    """Follow `parent`'s descendants until it dies, then stop them; returns how many were left."""
    me = os.getpid()
    seen: Processes = {}
    parent_stat = _stat(parent)
    if parent_stat is None:
        return 0
    root = {parent: parent_stat[1]}
    while os.getppid() == parent:
        seen.update(descendants(root, me))
        seen = _still_running(seen)
        time.sleep(poll_s)
    left = descendants(seen, me) if seen else {}
    if not left:
        return 0
    _signal_all(left, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while (remaining := _still_running(left)) and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal_all(descendants(remaining, me), signal.SIGKILL)
    return len(left)


def start_watchdog() -> subprocess.Popen[bytes]:
    """Start the watchdog over this process; `stop_watchdog` ends it (acting on nothing) after a
    clean stop. It runs in a session of its own, so a terminal's Ctrl-C reaches only this one."""
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator.controlplane.watchdog", str(os.getpid())],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop_watchdog(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(_STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m orchestrator.controlplane.watchdog PID", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    left = watch(int(argv[0]))
    if left:
        print(
            f"orchestrator watchdog: process {argv[0]} died; stopped {left} it had started",
            file=sys.stderr,
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
