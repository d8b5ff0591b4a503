"""The lifetime of a process that owns Ray: `orchestrator up` and `orchestrator control-plane`.

Both start (or join) a Ray cluster with blocking calls, then serve until SIGINT or SIGTERM, and
must leave no Ray node behind however they end. `ray_session` holds that once: SIGTERM unwinds a
blocking start like Ctrl-C, a local cluster is watched by the watchdog (should the process be
killed outright), and on the way out Ray is stopped with further stop signals ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Final

from orchestrator.config.schema import OrchestratorConfig
from orchestrator.controlplane.embedded_cluster import RayConnection
from orchestrator.controlplane.watchdog import start_watchdog, stop_watchdog

STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)

Progress = Callable[[str], None]


@contextlib.contextmanager
def ray_session(
    config: OrchestratorConfig, *, ray_address: str | None, progress: Progress
) -> Iterator[RayConnection]:
    """A local Ray cluster for `config` (`ray_address` None) or the cluster at `ray_address`,
    stopped (a local one whole) when the block ends, by a signal, a failure or a return.

    SIGTERM raises `KeyboardInterrupt` in the block until it ends, so a blocking start unwinds
    as on Ctrl-C; the handler it replaced is back afterwards.
    """
    previous = signal.signal(signal.SIGTERM, _interrupt)
    connection: RayConnection | None = None
    guard = start_watchdog() if ray_address is None else None
    try:
        if ray_address is None:
            connection = RayConnection.start_local(config)
            signal.signal(signal.SIGTERM, _interrupt)  # each Ray node put in a handler of its own
        else:
            connection = RayConnection.connect(ray_address)
        yield connection
    finally:
        with _signals_ignored():
            if connection is not None:
                progress("stopping Ray")
                connection.stop()
            if guard is not None:
                stop_watchdog(guard)
        signal.signal(signal.SIGTERM, previous)


async def until_stop_signal() -> None:
    """Return on the first SIGINT or SIGTERM the running event loop receives."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """A second Ctrl-C or SIGTERM while Ray stops would leave its nodes running: ignore them."""
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM while a blocking start-up step runs: unwind like Ctrl-C, stopping what started."""
    raise KeyboardInterrupt
