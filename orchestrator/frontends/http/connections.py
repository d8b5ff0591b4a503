"""What one HTTP server's connections share, and the sweep that applies their timeouts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from orchestrator.frontends.http.connection import HttpConnection
from orchestrator.frontends.http.limits import ConnectionSettings
from orchestrator.frontends.http.messages import DateField
from orchestrator.frontends.http.routes import RouteTable

SWEEP_EVERY_S: Final = 1.0


class Connections:
    """What one server's connections share: routes, limits, the `Date` line, the live set (for
    the timeout sweep and shutdown) and `count`, called once per answered counted request with
    its status (or `CLIENT_CLOSED`)."""

    def __init__(
        self,
        routes: RouteTable,
        settings: ConnectionSettings,
        count: Callable[[str], None] | None = None,
    ) -> None:
        self.routes = routes
        self.settings = settings
        self.count = count or (lambda _code: None)
        self.date = DateField()
        self.live: set[HttpConnection] = set()
        self._sweep: asyncio.TimerHandle | None = None

    def __call__(self) -> HttpConnection:
        return HttpConnection(self)

    def start(self) -> None:
        self._sweep = asyncio.get_running_loop().call_later(SWEEP_EVERY_S, self._expire)

    async def stop(self) -> None:
        """Close idle connections now and busy ones after their current answer, waiting up to
        `shutdown_grace_s` for them before closing what is left (which cancels its requests)."""
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        busy = [c.drained() for c in list(self.live) if c.close_when_idle()]
        if busy:
            await asyncio.wait(busy, timeout=self.settings.shutdown_grace_s)
        for connection in list(self.live):
            connection.abort()

    def _expire(self) -> None:
        loop = asyncio.get_running_loop()
        now_s = loop.time()
        for connection in list(self.live):
            connection.expire_if_past(now_s)
        self._sweep = loop.call_later(SWEEP_EVERY_S, self._expire)
