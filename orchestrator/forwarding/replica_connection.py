"""One keep-alive HTTP/1.1 client connection to a replica, framed by llhttp (`httptools`), and the
response it receives.

A request is one `transport.write`; llhttp parses the answer, and body bytes go to the reader as
they arrive. Framing is strict (RFC 9112): an answer the parser refuses, a status outside
100-599, a version other than HTTP/1.0 and 1.1, `Transfer-Encoding` together with
`Content-Length`, in an HTTP/1.0 answer or naming a coding other than `chunked`, more than
`MAX_INTERIM_ANSWERS` interim answers, a head over `MAX_HEAD_BYTES`, a body read whole that
outgrows its limit or bytes nobody asked for: each ends the exchange with
`UpstreamMalformed` (a clean 502 or terminal stream event for the client) and closes the
connection, so no byte of one answer is ever taken for part of another. Each exchange has an
absolute deadline on the event loop's clock; when it passes, the reader gets `TimeoutError` and
the connection is closed, so the replica stops working on the request. (One deadline timer per
connection, moved only when an exchange must end sooner than the one it was set for: with the
usual fixed timeout, a request costs no timer of its own.)
"""

from __future__ import annotations

import asyncio
import socket
from typing import Final, Protocol, cast

import httptools

from orchestrator.config.upstream import DEFAULT_MAX_ANSWER_BYTES
from orchestrator.forwarding.upstream_response import (
    PAUSE_READING_BYTES,
    UpstreamDisconnected,
    UpstreamError,
    UpstreamMalformed,
    UpstreamResponse,
)

__all__ = ["ConnectionHome", "ReplicaConnection", "UpstreamError", "UpstreamResponse"]
JOIN_BODY_BELOW_BYTES: Final = 64 * 1024  # smaller request bodies go out in one write with the head
MAX_HEAD_BYTES: Final = 64 * 1024  # an answer's status line and header fields, together
MAX_INTERIM_ANSWERS: Final = 8  # 1xx answers tolerated before the real one
_VERSIONS: Final = frozenset({"1.0", "1.1"})
_NO_BODY_STATUSES: Final = frozenset({204, 304})
_NEVER: Final = float("inf")


class _Malformed(Exception):
    """Raised inside a parser callback: the answer's framing is not one we can trust."""


class ConnectionHome(Protocol):
    """Where a connection goes back when an exchange ends (its pool's per-replica slot)."""

    def connection_done(self, connection: ReplicaConnection, reusable: bool) -> None:
        """The exchange is over: keep the connection for the next request if `reusable`."""

    def connection_closed(self, connection: ReplicaConnection) -> None:
        """The connection closed between exchanges (maybe while kept idle); may come twice."""


class ReplicaConnection(asyncio.Protocol):
    """One connection to one replica; carries one exchange at a time.

    `exchange()` sends a request and returns a future of its response head; the connection then
    belongs to that response until `UpstreamResponse.release()` or `close()` gives it back to
    `home` (`ConnectionHome.connection_done`).
    """

    def __init__(
        self, home: ConnectionHome, max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    ) -> None:
        self.home = home
        self.max_answer_bytes = max_answer_bytes
        self.closed = False
        self.idle_since_s = 0.0  # event-loop time when it last went idle
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._expecting = False  # an exchange is waiting for (the rest of) its answer
        self._head_waiter: asyncio.Future[UpstreamResponse] | None = None
        self._response: UpstreamResponse | None = None
        self._headers: dict[str, str] = {}
        self._repeated: dict[str, list[str]] = {}  # values of fields sent more than once
        self._head_bytes = 0  # field bytes of the head being parsed
        self._read_in_head = 0  # bytes read while a head is incomplete
        self._interim = 0
        self._in_head = False
        self._complete = False  # the current answer's message ended
        self._reusable = False
        self._paused = False
        self._draining = False  # reading the rest of a released response, to keep the connection
        self._timer: asyncio.TimerHandle | None = None  # a drain's bound
        self._deadline_s = _NEVER  # event-loop time the exchange awaiting its answer ends
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._deadline_timer_s = _NEVER  # when that timer fires: never after `_deadline_s`

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if not self._expecting or self._complete:
            self._broken("the replica sent bytes nobody asked for")
            return
        if self._in_head:
            self._read_in_head += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as error:
            cause = error.__context__
            self._broken(str(cause) if isinstance(cause, _Malformed) else "malformed response")
            return
        except httptools.HttpParserUpgrade:
            self._broken("the replica switched protocols")
            return
        except httptools.HttpParserError as refused:  # a name of its own: mypyc types each
            self._broken(f"malformed response: {refused}")
            return
        if self._in_head and self._read_in_head > MAX_HEAD_BYTES:
            self._broken("the response head is too long")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._stop_timers()
        if not self._expecting:
            self.home.connection_closed(self)
            return
        self._expecting = False
        if self._draining:
            self._stop_draining(False)
            return
        waiter, response = self._head_waiter, self._response
        if waiter is not None:
            self._head_waiter = None
            if not waiter.done():
                waiter.set_exception(UpstreamDisconnected("the replica closed the connection"))
        elif response is not None and not response._complete and response._error is None:
            if self._ends_with_connection():
                response._complete = True
            else:
                response._error = UpstreamDisconnected("the connection broke mid-response")
            response._wake()

    # -- httptools callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._complete or self._response is not None:
            raise _Malformed("bytes after the end of the response")
        self._headers = {}
        self._repeated = {}
        self._in_head = True
        self._head_bytes = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4
        if self._head_bytes > MAX_HEAD_BYTES:
            raise _Malformed("the response head is too long")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers = self._headers
        previous = headers.get(key)
        if previous is None:
            headers[key] = text
        else:  # joined once the head is whole: linear in the number of repeats
            self._repeated.setdefault(key, [previous]).append(text)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._read_in_head = 0
        parser = self._parser
        status = parser.get_status_code()
        version = parser.get_http_version()
        if version not in _VERSIONS:
            raise _Malformed(f"not an HTTP/1.x response (HTTP/{version})")
        if not 100 <= status <= 599:
            raise _Malformed(f"status {status:03d} is not a valid status code")
        headers = self._headers
        for key, values in self._repeated.items():
            headers[key] = ", ".join(values)
        coding = headers.get("transfer-encoding")
        if coding is not None:
            if version == "1.0" or "content-length" in headers:
                raise _Malformed("ambiguous framing: Transfer-Encoding in HTTP/1.0 or with length")
            if coding.strip().lower() != "chunked":  # nothing else is decoded here
                raise _Malformed(f"unsupported transfer coding {coding[:40]!r}")
        if status < 200:
            self._interim += 1
            if self._interim > MAX_INTERIM_ANSWERS or status == 101:
                raise _Malformed(f"unexpected interim answers (status {status})")
            return
        # (inline for the usual HTTP/1.1 answer with a length: a few calls fewer)
        keeps_alive = (version == "1.1" and "connection" not in headers) or _keeps_alive(
            version, headers
        )
        self._reusable = keeps_alive and (
            status in _NO_BODY_STATUSES
            or "transfer-encoding" in headers
            or "content-length" in headers
        )
        self._response = response = UpstreamResponse(status, headers, self, self.max_answer_bytes)
        waiter, self._head_waiter = self._head_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(response)

    def on_body(self, body: bytes) -> None:
        response = self._response
        if response is None or self._draining:
            return
        response._pieces.append(body)
        response._buffered += len(body)
        if response._whole and response._buffered > response.limit:
            response._pieces.clear()
            raise _Malformed(f"the replica's answer is over {response.limit} bytes")
        if response._buffered >= PAUSE_READING_BYTES and not response._whole and not self._paused:
            self._paused = True
            assert self._transport is not None
            self._transport.pause_reading()
        response._wake()

    def on_message_complete(self) -> None:
        response = self._response
        if response is None:  # an interim answer ended; the real one follows
            return
        self._complete = True
        self._deadline_s = _NEVER
        if self._draining:
            self._stop_draining(self._reusable)
            return
        response._complete = True
        response._wake()

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
        self._expecting = True
        self._complete = False
        self._interim = 0
        self._in_head = True
        self._read_in_head = 0
        self._head_waiter = waiter
        self._deadline_s = expires_at
        timer = self._deadline_timer
        if timer is None or self._deadline_timer_s > expires_at:
            if timer is not None:
                timer.cancel()
            self._deadline_timer = loop.call_at(expires_at, self._on_deadline)
            self._deadline_timer_s = expires_at
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
        self._deadline_s = _NEVER
        reuse = reusable and self._complete and self._reusable and not self.closed
        self._response = self._head_waiter = None
        self._expecting = False
        self._draining = False
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
        if response is None or self._complete or not self._reusable or self.closed:
            self.finish(reusable=self._complete)
            return
        self._cancel_timer()
        self._deadline_s = _NEVER
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

    def _ends_with_connection(self) -> bool:
        """Whether the answer in progress is framed by the connection's end (no length, not
        chunked), so that the end is the body's clean end."""
        headers = self._headers
        return "transfer-encoding" not in headers and "content-length" not in headers

    def _broken(self, reason: str) -> None:
        """The framing is lost: fail the exchange in progress (if any) and drop the connection."""
        self._reusable = False
        if self._expecting and not self._complete:
            self._fail(UpstreamMalformed(reason))
        else:
            self._abort()

    def _on_deadline(self) -> None:
        """The deadline timer fired: end the exchange if its deadline is this one, else (set
        for an earlier exchange) wait on for the current one's."""
        self._deadline_timer = None
        deadline_s = self._deadline_s
        if deadline_s == _NEVER or self.closed:
            return
        if self._deadline_timer_s < deadline_s:
            loop = asyncio.get_running_loop()
            self._deadline_timer = loop.call_at(deadline_s, self._on_deadline)
            self._deadline_timer_s = deadline_s
            return
        self._fail(TimeoutError("the request's deadline passed"))

    def _stop_draining(self, reusable: bool) -> None:
        """The drain ended: with the body (`reusable`), or by time, a broken body or a close."""
        self._draining = False
        self._reusable = self._reusable and reusable
        self.finish(reusable=reusable)

    def _fail(self, error: BaseException) -> None:
        """The exchange cannot go on: tell whoever waits for it, and close the connection."""
        self._reusable = False
        if self._draining:
            self._stop_draining(False)
            return
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
        self._stop_timers()
        if not self.closed:
            self.closed = True
            if self._transport is not None:
                self._transport.abort()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _stop_timers(self) -> None:
        self._cancel_timer()
        self._deadline_s = _NEVER
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None


def _keeps_alive(version: str, headers: dict[str, str]) -> bool:
    """RFC 9112 section 9.3: HTTP/1.1 persists unless `close` is a token of `Connection`;
    HTTP/1.0 only with a `keep-alive` token."""
    field = headers.get("connection")
    tokens = set() if field is None else {t.strip().lower() for t in field.split(",")}
    if version == "1.1":
        return "close" not in tokens
    return "keep-alive" in tokens and "close" not in tokens
