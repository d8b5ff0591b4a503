"""A benchmark's child processes, all on loopback: free ports, `orchestrator` commands run as
children, waiting until one answers over HTTP, and stopping each one whatever happens.

Every benchmark that starts replicas, routers or peers uses these, so each child is stopped the
same way (SIGTERM, SIGKILL after `STOP_WAIT_S`) and a child that dies while starting says so at
once instead of after the whole wait.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

STOP_WAIT_S: Final = 15.0
_POLL_S: Final = 0.1


def free_port() -> int:
    """A port free on 127.0.0.1 just now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def orchestrator_argv(*args: str, log_level: str = "WARNING") -> list[str]:
    """`python -m orchestrator ARGS` with this interpreter."""
    return [sys.executable, "-m", "orchestrator", "--log-level", log_level, *args]


@contextlib.contextmanager
def child(
    argv: Sequence[str],
    log: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stop_wait_s: float = STOP_WAIT_S,
) -> Iterator[subprocess.Popen[bytes]]:
    """`argv` as a child process (output to `log`, else discarded), in a session of its own so
    a terminal's Ctrl-C reaches only the benchmark, which stops it on the way out (SIGKILL
    after `stop_wait_s`)."""
    with contextlib.ExitStack() as files:
        sink = files.enter_context(log.open("wb")) if log is not None else subprocess.DEVNULL
        process = subprocess.Popen(
            argv, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
        )
    try:
        yield process
    finally:
        stop(process, stop_wait_s)


def stop(process: subprocess.Popen[bytes], wait_s: float = STOP_WAIT_S) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `wait_s`."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_WAIT_S)


def wait_http(
    url: str,
    timeout_s: float,
    accept: Callable[[bytes], bool] = lambda _: True,
    tls: ssl.SSLContext | None = None,
    process: subprocess.Popen[bytes] | None = None,
) -> None:
    """Return once `url` answers 200 with a body `accept` takes; `RuntimeError` when
    `timeout_s` passes first, or as soon as `process` (the server behind it) exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{url}: its process exited with {process.returncode} first")
        with (
            contextlib.suppress(OSError, ValueError),
            urllib.request.urlopen(url, timeout=2, context=tls) as response,
        ):
            if response.status == 200 and accept(response.read()):
                return
        time.sleep(_POLL_S)
    raise RuntimeError(f"{url} did not become ready within {timeout_s:.0f} s")
