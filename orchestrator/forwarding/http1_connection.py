"""One keep-alive HTTP/1.1 client connection on `asyncio.Protocol`, and the response it receives.

The router's forwarding client in its leanest form: a request is one `transport.write`, the
response head is parsed once it is whole, and body bytes go to the reader as they arrive (a
whole small answer usually arrives with its head, in the same read). Each exchange has an
absolute deadline on the event loop's clock; when it passes, the reader gets `TimeoutError` and
the connection is closed, so the replica stops working on the request.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Final, Protocol, cast

from orchestrator.forwarding.http1_wire import (
    MAX_HEAD_BYTES,
    BodyDecoder,
    HttpFramingError,
    body_decoder,
    parse_head,
)

PAUSE_READING_BYTES: Final = 256 * 1024  # streamed bytes buffered, unread, before reading pauses
JOIN_BODY_BELOW_BYTES: Final = 64 * 1024  # smaller request bodies go out in one write with the head


class UpstreamError(Exception):
    """Talking to a replica failed; the subclasses say at which point."""


class UpstreamConnectError(UpstreamError):
    """No connection could be opened: refused, unreachable, no address, TLS failed, timed out."""


class UpstreamDisconnected(UpstreamError):
    """The connection ended, or the response's framing broke, before the whole response came."""


class ConnectionHome(Protocol):
    """Where a connection goes back when an exchange ends (its pool's per-replica slot)."""

    def connection_done(self, connection: Http1Connection, reusable: bool) -> None:
        """The exchange is over: keep the connection for the next request if `reusable`."""

    def connection_closed(self, connection: Http1Connection) -> None:
        """The connection closed between exchanges (maybe while kept idle); may come twice."""


class UpstreamResponse:
    """A response as it arrives: `status`, `headers` (lower-case names) and the body.

    Read the body with `read()` (all of it) or `read_some()` (what has arrived, at least one
    byte; b"" once it ended). Reads raise `UpstreamDisconnected` when the connection broke and
    `TimeoutError` when the exchange's deadline passed. Then call `release()` once done, which
    keeps the connection for another request when the body ended cleanly, or `close()`, which
    drops it (the replica sees the connection close); either may be called more than once.
    """

    __slots__ = ("_buffered", "_complete", "_connection", "_error", "_pieces", "_waiter", "_whole",
                 "headers", "status")  # fmt: skip

    def __init__(self, status: int, headers: dict[str, str], connection: Http1Connection) -> None:
        self.status = status
        self.headers = headers
        self._connection: Http1Connection | None = connection
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

    async def read(self) -> bytes:
        """The whole (rest of the) body; it is buffered however large it is."""
        if not self._whole:
            self._whole = True  # reading must not pause: nothing is taken before the end
            if self._connection is not None:
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


class Http1Connection(asyncio.Protocol):
    """One connection to one replica; carries one exchange at a time.

    `exchange()` sends a request and returns a future of its response head; the connection then
    belongs to that response until `UpstreamResponse.release()` or `close()` gives it back to
    `home` (`ConnectionHome.connection_done`).
    """

    def __init__(self, home: ConnectionHome) -> None:
        self.home = home
        self.closed = False
        self.idle_since_s = 0.0  # event-loop time when it last went idle
        self._transport: asyncio.Transport | None = None
        self._head = b""
        self._head_waiter: asyncio.Future[UpstreamResponse] | None = None
        self._response: UpstreamResponse | None = None
        self._decoder: BodyDecoder | None = None
        self._reusable = False
        self._paused = False
        self._draining = False  # reading the rest of a released response, to keep the connection
        self._timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self._response is not None:
            self._feed(data)
            return
        waiter = self._head_waiter
        if waiter is None:  # bytes nobody asked for: the framing is lost, drop the connection
            self._reusable = False
            self._abort()
            return
        if self._head:
            data = self._head + data
        end = data.find(b"\r\n\r\n")
        if end < 0:
            if len(data) > MAX_HEAD_BYTES:
                self._fail(UpstreamDisconnected("the response head is too long"))
            else:
                self._head = data
            return
        self._head = b""
        try:
            head = parse_head(data[:end])
            if head.status < 200:  # 1xx interim answers: the real one follows
                if len(data) > end + 4:
                    self.data_received(data[end + 4 :])
                return
            decoder, self._reusable = body_decoder(head)
        except HttpFramingError as error:
            self._fail(UpstreamDisconnected(f"malformed response: {error}"))
            return
        self._head_waiter = None
        self._response = response = UpstreamResponse(head.status, head.headers, self)
        self._decoder = decoder
        self._feed(data[end + 4 :])
        if not waiter.done():
            waiter.set_result(response)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_timer()
        waiter, response, decoder = self._head_waiter, self._response, self._decoder
        if waiter is not None:
            self._head_waiter = None
            if not waiter.done():
                waiter.set_exception(UpstreamDisconnected("the replica closed the connection"))
        elif self._draining:
            self._stop_draining(decoder is not None and decoder.eof())
        elif response is not None and decoder is not None:
            if not response._complete and response._error is None:
                if decoder.eof():
                    response._complete = True
                else:
                    response._error = UpstreamDisconnected("the connection broke mid-response")
                response._wake()
        else:
            self.home.connection_closed(self)

    # -- the exchange --------------------------------------------------------------------------

    def exchange(
        self, head: bytes, body: bytes, expires_at: float
    ) -> asyncio.Future[UpstreamResponse]:
        """Send a request; the future gets the response once its head is in.

        `expires_at` is event-loop time; past it the future (or the body reads) raise
        `TimeoutError` and the connection closes.
        """
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[UpstreamResponse] = loop.create_future()
        transport = self._transport
        if self.closed or transport is None or transport.is_closing():
            waiter.set_exception(UpstreamDisconnected("the replica closed the connection"))
            return waiter
        self._head_waiter = waiter
        self._timer = loop.call_at(expires_at, self._expire)
        try:
            if len(body) < JOIN_BODY_BELOW_BYTES:
                transport.write(head + body)
            else:  # no copy of a large body
                transport.write(head)
                transport.write(body)
        except (OSError, RuntimeError) as error:  # the transport broke before we heard of it
            self._fail(UpstreamDisconnected(f"cannot send the request: {error}"))
        return waiter

    def finish(self, *, reusable: bool) -> None:
        """End the exchange: back to `home`, to be reused when it ended cleanly, else closed."""
        self._cancel_timer()
        self._response = self._decoder = self._head_waiter = None
        reuse = reusable and self._reusable and not self.closed
        if reuse:
            if self._paused:
                self.resume()
        else:
            self._abort()
        self.home.connection_done(self, reuse)

    def drain(self, drain_s: float) -> None:
        """Like `finish`, but first read and drop the rest of the body, for up to `drain_s`
        seconds; the connection is kept if the body ends cleanly within them."""
        response = self._response
        if response is None or response._complete or not self._reusable or self.closed:
            self.finish(reusable=response is not None and response._complete)
            return
        self._cancel_timer()
        self._draining = True
        response._pieces.clear()
        response._buffered = 0
        self.resume()
        self._timer = asyncio.get_running_loop().call_later(drain_s, self._stop_draining, False)

    def resume(self) -> None:
        if self._paused and self._transport is not None and not self.closed:
            self._paused = False
            self._transport.resume_reading()

    def close(self) -> None:
        """Close the connection now (an idle one, or at shutdown)."""
        self._abort()

    # -- internals -----------------------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        response, decoder = self._response, self._decoder
        assert response is not None and decoder is not None
        if response._complete or response._error is not None:
            if data:  # more than the body: the framing is lost
                self._reusable = False
            return
        try:
            payload = decoder.feed(data)
        except HttpFramingError as error:
            self._fail(UpstreamDisconnected(f"malformed response body: {error}"))
            return
        if self._draining:
            if decoder.done:
                self._stop_draining(not decoder.extra)
            return
        if payload:
            response._pieces.append(payload)
            response._buffered += len(payload)
        if decoder.done:
            response._complete = True
            if decoder.extra:
                self._reusable = False
            self._cancel_timer()
        elif response._buffered >= PAUSE_READING_BYTES and not response._whole and not self._paused:
            self._paused = True
            assert self._transport is not None
            self._transport.pause_reading()
        response._wake()

    def _expire(self) -> None:
        self._timer = None
        self._fail(TimeoutError("the request's deadline passed"))

    def _stop_draining(self, reusable: bool) -> None:
        """The drain ended: with the body (`reusable`), or by time, a broken body or a close."""
        self._draining = False
        self._reusable = self._reusable and reusable
        self.finish(reusable=reusable)

    def _fail(self, error: BaseException) -> None:
        """The exchange cannot go on: tell whoever waits for it, and close the connection."""
        if self._draining:
            self._stop_draining(False)
            return
        self._reusable = False
        waiter, response = self._head_waiter, self._response
        if waiter is not None:
            self._head_waiter = None
            if not waiter.done():
                waiter.set_exception(error)
        elif response is not None and not response._complete and response._error is None:
            response._error = error
            response._wake()
        self._abort()

    def _abort(self) -> None:
        """Close at once: the peer sees the connection end now, not after buffered writes."""
        self._cancel_timer()
        if not self.closed:
            self.closed = True
            if self._transport is not None:
                self._transport.abort()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
