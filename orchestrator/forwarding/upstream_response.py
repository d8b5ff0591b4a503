"""A replica's response as it arrives, and the ways talking to a replica fails."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from orchestrator.forwarding.replica_connection import ReplicaConnection

PAUSE_READING_BYTES: Final = 256 * 1024  # streamed bytes buffered, unread, before reading pauses


class UpstreamError(Exception):
    """Talking to a replica failed; the subclasses say at which point."""


class UpstreamConnectError(UpstreamError):
    """No connection could be opened: refused, unreachable, no address, TLS failed, timed out."""


class UpstreamDisconnected(UpstreamError):
    """The connection ended, or the response's framing broke, before the whole response came."""


class UpstreamMalformed(UpstreamDisconnected):
    """The replica's answer broke HTTP/1.1 framing (RFC 9112); the connection was dropped."""


class UpstreamResponse:
    """A response as it arrives: `status`, `headers` (lower-case names) and the body.

    Read the body with `read()` (all of it, up to a size limit) or `read_some()` (what has
    arrived, at least one byte; b"" once it ended). Reads raise `UpstreamDisconnected` when the
    connection broke, `UpstreamMalformed` when a whole body outgrows its limit (the connection
    is dropped, the rest never read) and `TimeoutError` when the exchange's deadline passed.
    Then call `release()` once done, which keeps the connection for another request when the
    body ended cleanly, or `close()`, which drops it (the replica sees the connection close);
    either may be called more than once.
    """

    __slots__ = ("_buffered", "_complete", "_connection", "_error", "_pieces", "_waiter", "_whole",
                 "headers", "limit", "status")  # fmt: skip

    def __init__(
        self, status: int, headers: dict[str, str], connection: ReplicaConnection, limit: int
    ) -> None:
        self.status = status
        self.limit = limit  # bytes `read()` takes at most; more drops the connection
        self.headers = headers
        self._connection: ReplicaConnection | None = connection
        self._pieces: list[bytes] = []
        self._buffered = 0
        self._complete = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._whole = False  # read() is collecting the whole body

    @property
    def finished(self) -> bool:
        """The whole body arrived and has been read."""
        return self._complete and not self._pieces

    @property
    def unread(self) -> bool:
        """Body bytes arrived that nobody has read yet (the reader, not the replica, is behind)."""
        return bool(self._pieces)

    async def read(self, limit: int | None = None) -> bytes:
        """The whole (rest of the) body, if within `limit` bytes (default: the pool's cap on an
        answer); a larger one raises `UpstreamMalformed` as soon as its length says so."""
        if limit is not None:
            self.limit = limit
        length = self.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.limit:
            self.outgrown()
        if not self._whole:
            self._whole = True  # reading must not pause: nothing is taken before the end
            if self._connection is not None and not self._complete:
                self._connection.resume()
        while not self._complete:
            if self._error is not None:
                raise self._error
            await self._wait()
        return self._take()

    async def read_some(self) -> bytes:
        """Body bytes that arrived since the last read, waiting for some; b"" at the end."""
        while not self._pieces:
            if self._error is not None:
                raise self._error
            if self._complete:
                return b""
            await self._wait()
        return self._take()

    def release(self, drain_s: float = 0.0) -> None:
        """Done with the response: keep its connection if the body ended cleanly, or, given
        `drain_s`, if the rest of the body (unread, dropped) arrives within that many seconds."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if not self._complete and self._error is None and drain_s > 0:
            connection.drain(drain_s)
        else:
            connection.finish(reusable=self._complete)

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.finish(reusable=False)

    def fail(self, error: UpstreamError) -> None:
        """End the body now with `error` for its reader and drop the connection (the replica
        sees it close): how the router's own bounds end an answer, such as a stream's stall
        timeout. Nothing happens once the body ended."""
        connection = self._connection
        if connection is not None and not self._complete and self._error is None:
            connection._fail(error)

    def outgrown(self) -> None:
        """The body is over its limit: drop the connection and fail the read."""
        error = UpstreamMalformed(f"the replica's answer is over {self.limit} bytes")
        self._error = error
        self._pieces.clear()
        self.close()
        raise error

    def _take(self) -> bytes:
        pieces = self._pieces
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        pieces.clear()
        if self._buffered >= PAUSE_READING_BYTES and self._connection is not None:
            self._connection.resume()
        self._buffered = 0
        return data

    async def _wait(self) -> None:
        self._waiter = waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
