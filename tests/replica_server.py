"""Run real simulated replicas for tests: each in its own thread and event loop, on port 0."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

from orchestrator.sim.replica import ReplicaSettings, build_app


class ReplicaThread:
    """A replica serving on 127.0.0.1 from a background thread until `stop()`."""

    def __init__(self, settings: ReplicaSettings) -> None:
        self.settings = settings
        self.app: web.Application | None = None
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._runner: web.AppRunner | None = None
        self._error: BaseException | None = None

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._start())
        except BaseException as error:  # surfaced to the test thread in start()
            self._error = error
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup() if self._runner else asyncio.sleep(0))
        self._loop.close()

    async def _start(self) -> None:
        self.app = build_app(self.settings)
        self._runner = web.AppRunner(self.app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    def start(self) -> ReplicaThread:
        self._thread.start()
        self._ready.wait(timeout=30)
        if self._error is not None:
            raise RuntimeError("replica failed to start") from self._error
        return self

    def call(self, coroutine_factory, timeout_s: float = 30.0):
        """Run a coroutine on the replica's loop (to read engine state safely)."""
        future = asyncio.run_coroutine_threadsafe(coroutine_factory(), self._loop)
        return future.result(timeout_s)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)


@contextmanager
def replica(settings: ReplicaSettings) -> Iterator[ReplicaThread]:
    server = ReplicaThread(settings).start()
    try:
        yield server
    finally:
        server.stop()
