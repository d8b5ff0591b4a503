"""The router's one HTTP client to the replicas: keep-alive HTTP/1.1 connections, pooled per
replica, shared by every request, the scraper and the health checks of one router process.

A general-purpose client (aiohttp's) cost the router more per request than everything else on
its hot path together; this one does only what forwarding needs: POST a JSON body or GET a page,
then read the answer whole or as it arrives (`replica_connection`, framed by llhttp). A request
reuses the most recently used idle connection to its replica, so a busy router rarely opens one.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import deque
from collections.abc import Coroutine, Set
from typing import Any, Final
from urllib.parse import urlsplit

from orchestrator.core.errors import OrchestratorError
from orchestrator.forwarding.replica_connection import ReplicaConnection
from orchestrator.forwarding.upstream_response import (
    UpstreamConnectError,
    UpstreamDisconnected,
    UpstreamError,
    UpstreamMalformed,
    UpstreamResponse,
)
from orchestrator.forwarding.upstream_settings import UpstreamSettings
from orchestrator.security.files import Signature
from orchestrator.security.http_tls import client_context

__all__ = [
    "UpstreamConnectError",
    "UpstreamDisconnected",
    "UpstreamError",
    "UpstreamMalformed",
    "UpstreamPool",
    "UpstreamResponse",
    "UpstreamSettings",
]

log = logging.getLogger(__name__)

TLS_CHECK_INTERVAL_S: Final = 1.0  # how often the replica TLS files are stat'ed, at most
_JSON_HEADERS: Final = b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"


class _Origin:
    """One replica's address (scheme, host, port), its idle connections and requests in flight."""

    __slots__ = ("connections", "host", "host_header", "idle", "in_flight", "pool", "port", "tls")

    def __init__(self, pool: UpstreamPool, base_url: str) -> None:
        parts = urlsplit(base_url)
        try:
            port = parts.port
        except ValueError:  # out of range
            port = -1
        if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
            raise UpstreamConnectError(f"not an http(s) replica URL: {base_url!r}")
        self.pool = pool
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = port or (443 if self.tls else 80)
        self.host_header = parts.netloc.encode("idna")
        self.idle: deque[ReplicaConnection] = deque()  # newest last
        self.connections: set[ReplicaConnection] = set()
        self.in_flight = 0

    def take_idle(self, now_s: float, keepalive_s: float) -> ReplicaConnection | None:
        """The most recently used idle connection, unless even that one idled too long."""
        idle = self.idle
        while idle:
            connection = idle.pop()
            if connection.closed:
                continue
            if now_s - connection.idle_since_s < keepalive_s:
                return connection
            self.drop(connection)
            while idle:  # every other one went idle earlier still
                self.drop(idle.pop())
        return None

    def close_idle_before(self, cutoff_s: float) -> None:
        idle = self.idle
        while idle and idle[0].idle_since_s <= cutoff_s:
            self.drop(idle.popleft())

    def drop(self, connection: ReplicaConnection) -> None:
        self.connections.discard(connection)
        connection.close()

    # -- ConnectionHome ------------------------------------------------------------------------

    def connection_done(self, connection: ReplicaConnection, reusable: bool) -> None:
        if reusable and self.pool.running:
            connection.idle_since_s = self.pool.loop_time()
            self.idle.append(connection)
            self.pool.went_idle()
        else:
            self.drop(connection)
        self.pool.done(self)

    def connection_closed(self, connection: ReplicaConnection) -> None:
        self.connections.discard(connection)
        if connection in self.idle:
            self.idle.remove(connection)


class UpstreamPool:
    """Owns the connections; `start()` inside the router's event loop, `close()` when it stops.

    `post_json` and `get` return an `UpstreamResponse` once its head arrived; the caller reads
    the body and then must `release()` (keep the connection) or `close()` it. Both raise
    `UpstreamConnectError` (no connection could be opened within the connect timeout),
    `UpstreamDisconnected` (the connection ended before the head) or `TimeoutError` (the
    request's time ran out; its connection is closed).
    """

    def __init__(self, settings: UpstreamSettings | None = None) -> None:
        self.settings = settings or UpstreamSettings()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._origins: dict[str, _Origin] = {}
        self._in_flight = 0
        self._waiters: deque[tuple[_Origin, asyncio.Future[None]]] = deque()  # FIFO
        self._tls: ssl.SSLContext | None = None
        self._tls_signature: Signature | None = None
        self._tls_checked_s = float("-inf")
        self._sweep: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()

    async def close(self) -> None:
        """Close every connection, idle or carrying a request (that request then fails)."""
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for origin in self._origins.values():
            origin.idle.clear()
            for connection in list(origin.connections):
                connection.close()
            origin.connections.clear()
        self._origins.clear()
        self._loop = None

    def post_json(
        self, base_url: str, path: str, body: bytes, *, timeout_s: float, connect_timeout_s: float
    ) -> Coroutine[Any, Any, UpstreamResponse]:
        """POST `body` (JSON, sent as it is) to `path` on the replica at `base_url`; await it.

        `timeout_s` bounds the whole exchange, body included; `connect_timeout_s` bounds
        opening a connection when no idle one is kept. (The request's coroutine is handed back,
        not awaited here: one coroutine less on the hot path.)
        """
        request_line = b"POST " + path.encode() + b" HTTP/1.1\r\nHost: "
        headers = _JSON_HEADERS % len(body)
        return self._request(base_url, request_line, headers, body, timeout_s, connect_timeout_s)

    def get(
        self, base_url: str, path: str, *, timeout_s: float, connect_timeout_s: float
    ) -> Coroutine[Any, Any, UpstreamResponse]:
        """GET `path` on the replica at `base_url`; await it. Timeouts as for `post_json`."""
        request_line = b"GET " + path.encode() + b" HTTP/1.1\r\nHost: "
        return self._request(base_url, request_line, b"\r\n", b"", timeout_s, connect_timeout_s)

    # -- for _Origin ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Between `start()` and `close()`."""
        return self._loop is not None

    def loop_time(self) -> float:
        return self._running_loop().time()

    def went_idle(self) -> None:
        if self._sweep is None and self._loop is not None:
            self._sweep = self._loop.call_later(self.settings.keepalive_s, self._close_stale)

    def done(self, origin: _Origin) -> None:
        """A request gave its slot back: hand it to the longest waiter that may take it."""
        origin.in_flight -= 1
        self._in_flight -= 1
        if self._waiters:
            self._wake_waiter()

    def forget_except(self, live_urls: Set[str]) -> None:
        """Drop replicas that left the table: close their idle connections and, once nothing is
        in flight to one, its entry (so the origins stay about as many as the table's)."""
        for base_url in [u for u in self._origins if u not in live_urls]:
            origin = self._origins[base_url]
            while origin.idle:
                origin.drop(origin.idle.pop())
            if origin.in_flight == 0:
                del self._origins[base_url]

    def origins(self) -> int:
        return len(self._origins)

    # -- internals -----------------------------------------------------------------------------

    async def _request(
        self,
        base_url: str,
        request_line: bytes,
        headers: bytes,
        body: bytes,
        timeout_s: float,
        connect_timeout_s: float,
    ) -> UpstreamResponse:
        """`request_line` ends where the Host header's value goes; `headers` end the head."""
        loop = self._running_loop()
        expires_at = loop.time() + timeout_s
        origin = self._origins.get(base_url) or self._add_origin(base_url)
        settings = self.settings
        if (
            origin.in_flight >= settings.limit_per_host
            or self._in_flight >= settings.limit
            or self._waiters
        ):
            await self._wait_turn(origin, expires_at)
        else:
            origin.in_flight += 1
            self._in_flight += 1
        try:
            connection = origin.take_idle(loop.time(), settings.keepalive_s)
            if connection is None:
                connect_s = min(connect_timeout_s, expires_at - loop.time())
                connection = await self._connect(origin, connect_s)
        except BaseException:
            self.done(origin)
            raise
        head = request_line + origin.host_header + b"\r\n" + headers
        try:
            return await connection.exchange(head, body, expires_at)
        except BaseException:
            connection.finish(reusable=False)
            raise

    async def _connect(self, origin: _Origin, timeout_s: float) -> ReplicaConnection:
        loop = self._running_loop()
        tls = self._tls_context() if origin.tls else None
        try:
            if timeout_s <= 0:
                raise TimeoutError
            async with asyncio.timeout(timeout_s):
                _, connection = await loop.create_connection(
                    lambda: ReplicaConnection(origin, self.settings.max_answer_bytes),
                    origin.host,
                    origin.port,
                    ssl=tls,
                    server_hostname=origin.host if tls else None,
                )
        except TimeoutError:
            raise UpstreamConnectError(
                f"no connection to {origin.host}:{origin.port} within {timeout_s:.3g} s"
            ) from None
        except OSError as error:  # refused, unreachable, no such host, TLS handshake failed
            raise UpstreamConnectError(
                f"cannot connect to {origin.host}:{origin.port}: {error}"
            ) from error
        origin.connections.add(connection)
        return connection

    async def _wait_turn(self, origin: _Origin, expires_at: float) -> None:
        """Wait until `origin` is under its limits; the slot is counted when this returns."""
        loop = self._running_loop()
        turn: asyncio.Future[None] = loop.create_future()
        self._waiters.append((origin, turn))
        self._wake_waiter()  # the limits may allow it right now (others waited before it)
        try:
            async with asyncio.timeout_at(expires_at):
                await turn
        except BaseException:
            if turn.done() and not turn.cancelled():
                self.done(origin)  # it was handed a slot it will not use
            else:
                turn.cancel()
            raise

    def _wake_waiter(self) -> None:
        settings = self.settings
        for entry in self._waiters:
            origin, turn = entry
            if turn.done():
                continue
            if self._in_flight >= settings.limit:
                break
            if origin.in_flight < settings.limit_per_host:
                origin.in_flight += 1
                self._in_flight += 1
                turn.set_result(None)
                break
        while self._waiters and self._waiters[0][1].done():
            self._waiters.popleft()

    def _add_origin(self, base_url: str) -> _Origin:
        origin = self._origins[base_url] = _Origin(self, base_url)
        return origin

    def _close_stale(self) -> None:
        self._sweep = None
        if self._loop is None:
            return
        cutoff_s = self._loop.time() - self.settings.keepalive_s
        for origin in self._origins.values():
            origin.close_idle_before(cutoff_s)
        if any(origin.idle for origin in self._origins.values()):
            self.went_idle()

    def _tls_context(self) -> ssl.SSLContext:
        """The client context for `https` replicas, rebuilt when the replica TLS files were
        rotated (checked at most every `TLS_CHECK_INTERVAL_S`); new connections use it, open
        ones keep theirs. Files caught mid-rotation keep the previous context (logged)."""
        tls = self.settings.replica_tls
        if tls is None:
            if self._tls is None:
                self._tls = ssl.create_default_context()
            return self._tls
        now_s = self.loop_time()
        if self._tls is not None and now_s - self._tls_checked_s < TLS_CHECK_INTERVAL_S:
            return self._tls
        self._tls_checked_s = now_s
        signature = tls.signature()
        if self._tls is not None and signature == self._tls_signature:
            return self._tls
        try:
            context = client_context(tls)
        except OrchestratorError as error:
            if self._tls is None:
                raise
            log.warning("replica TLS files unusable, keeping the previous ones: %s", error.message)
            return self._tls
        if self._tls is not None:
            log.info("replica TLS files changed; new connections use them")
        self._tls, self._tls_signature = context, signature
        return context

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the upstream pool is not started; call start() first")
        return self._loop
