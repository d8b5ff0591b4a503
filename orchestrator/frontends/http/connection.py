"""The router's HTTP/1.1 server connection: llhttp (`httptools`) parses every request, a route
table picks its handler, and answers are framed here. Plaintext and TLS (asyncio's SSL
transport) connections run this same code.

Per RFC 9112 and aiohttp's limits: anything llhttp refuses (bad request line, bad field name or
value, obsolete line folding, bare LF, `Transfer-Encoding` with `Content-Length`, an unknown
transfer coding) is a 400 that closes the connection; versions other than HTTP/1.0 and 1.1 get
505; more than `max_fields` fields, a field or target over `max_field_bytes` or a head over
`max_head_bytes` get 431 (414 for the target); a body over the limit gets 413 without being kept
(the rest is read and dropped for up to `LINGER_S`, so the client sees the 413, not a reset).
Requests are answered in order (pipelining), one at a time; while one is served, reading pauses
once the next is whole. A route's head check (the API key) runs before its body is read.

Timeouts, one policy: a connection without a request in progress is closed after `idle_s`; once
a request's first byte arrives its whole head must arrive within `head_timeout_s` and then its
body within `body_timeout_s` (bytes trickling in do not extend either); past them the client gets
408 and the connection closes. Slow readers: nothing waits on a client. Bytes it has not read
build up in the transport; a stream whose client is more than `stream_buffer_bytes` behind is
cut (its source closed, the answer's cut event and the last chunk queued, the connection
closed, and aborted after `cut_grace_s` if the client still has not read).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, cast

import httptools

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.openai_errors import served_error
from orchestrator.frontends.http.messages import (
    Answer,
    DateField,
    Request,
    StreamAnswer,
    error_answer,
    header_field,
    status_line,
)
from orchestrator.frontends.http.routes import Match, NoRoute, RouteTable

log = logging.getLogger(__name__)

CLIENT_CLOSED: Final = "499"  # the code counted for a request whose client went away (nginx's)
SWEEP_EVERY_S: Final = 1.0
_VERSIONS: Final = frozenset({"1.0", "1.1"})
_LAST_CHUNK: Final = b"0\r\n\r\n"
_CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"
LINGER_S: Final = 5.0  # after a 413, how long the rest of the body is read and dropped
LINGER_BYTES: Final = 64 * 1024 * 1024  # and how much of it at most


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """Limits of one server's connections (sizes in bytes, times in seconds)."""

    max_body_bytes: int = 8 * 1024 * 1024
    stream_buffer_bytes: int = 1024 * 1024
    idle_s: float = 75.0
    head_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_fields: int = 128
    max_field_bytes: int = 8190
    max_head_bytes: int = 64 * 1024
    cut_grace_s: float = 5.0
    shutdown_grace_s: float = 60.0


class _Refuse(Exception):
    """Raised in a parser callback: answer this and close the connection."""

    def __init__(self, status: int, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.answer = error_answer(OrchestratorError(code, message), status)


@dataclass(slots=True)
class _Pending:
    """A whole request waiting for its turn, or an answer decided from its head alone."""

    match: Match | None
    request: Request | None
    answer: Answer | None
    keep_alive: bool
    http10: bool
    counted: bool = False


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


class HttpConnection(asyncio.Protocol):
    """One client connection, plaintext or TLS."""

    def __init__(self, shared: Connections) -> None:
        self._shared = shared
        self._settings = shared.settings
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._deadline_s = float("inf")
        self._timeout_status = 0  # 0 while idle, else 408 once a request is being read
        # the request being read
        self._url: list[bytes] = []
        self._url_bytes = 0
        self._headers: dict[str, str] = {}
        self._repeated: dict[str, list[str]] = {}
        self._fields = 0
        self._field_bytes = 0  # of the head's fields, as parsed
        self._in_head = False
        self._head_bytes = 0  # read while a head is incomplete
        self._match: Match | None = None
        self._identity: object = None
        self._early: Answer | None = None  # answered from the head; its body is dropped
        self._early_counted = False
        self._keep_alive = True
        self._http10 = False
        self._keep_body = False
        self._body: list[bytes] = []
        self._body_bytes = 0
        # serving
        self._queue: deque[_Pending] = deque()
        self._task: asyncio.Task[None] | None = None
        self._parsing = True  # False once the parser stopped (error, upgrade): no more requests
        self._closing = False
        self._paused = False
        self._answering = False  # bytes of the current answer have been written
        self._lingering = False  # a 413 is out: drop what the client still sends, then close
        self._lingered_bytes = 0
        self._done: asyncio.Future[None] | None = None

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._deadline_s = self._loop.time() + self._settings.idle_s
        self._shared.live.add(self)

    def data_received(self, data: bytes) -> None:
        if not self._parsing:
            if self._lingering:
                self._lingered_bytes += len(data)
                if self._lingered_bytes > LINGER_BYTES:
                    self.abort()
            return
        if self._in_head:
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as error:
            cause = error.__context__
            if isinstance(cause, _Refuse):
                if self._match is not None and self._match.route.counted:
                    self._shared.count(str(cause.answer.status))
                # A client still sending a body too large would see a reset, not the 413,
                # if the connection closed under it: read on and drop the rest for a while.
                self._lingering = cause.answer.status == 413
                self._stop_parsing(cause.answer)
            else:
                log.error("unhandled error reading a request", exc_info=cause)
                internal = OrchestratorError(ErrorCode.INTERNAL, "internal server error")
                self._stop_parsing(error_answer(internal))
        except httptools.HttpParserUpgrade:
            self._stop_parsing(None)  # answered as plain HTTP; the connection closes after it
        except httptools.HttpParserError as error:
            self._stop_parsing(_bad_request(f"malformed HTTP request: {error}"))
        else:
            if self._in_head and self._head_bytes > self._settings.max_head_bytes:
                self._stop_parsing(_too_large_head(self._settings.max_head_bytes))
                return
        self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._parsing = False
        self._queue.clear()
        self._shared.live.discard(self)
        if self._task is not None:
            self._task.cancel()
        self._finished()

    # -- httptools callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = []
        self._url_bytes = 0
        self._headers = {}
        self._repeated = {}
        self._fields = 0
        self._field_bytes = 0
        self._in_head = True
        self._head_bytes = 0
        self._match = None
        self._identity = None
        self._early = None
        self._early_counted = False
        self._keep_body = False
        self._body = []
        self._body_bytes = 0
        self._timeout_status = 408
        self._deadline_s = self._loop.time() + self._settings.head_timeout_s

    def on_url(self, url: bytes) -> None:
        self._url_bytes += len(url)
        if self._url_bytes > self._settings.max_field_bytes:
            raise _Refuse(414, ErrorCode.INVALID_ARGUMENT, "the request target is too long")
        self._url.append(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        settings = self._settings
        self._fields += 1
        if self._fields > settings.max_fields:
            raise _Refuse(
                431, ErrorCode.INVALID_ARGUMENT, f"more than {settings.max_fields} header fields"
            )
        if len(name) + len(value) > settings.max_field_bytes:
            raise _Refuse(
                431,
                ErrorCode.INVALID_ARGUMENT,
                f"a header field is longer than {settings.max_field_bytes} bytes",
            )
        self._field_bytes += len(name) + len(value) + 4
        if self._field_bytes > settings.max_head_bytes:
            raise _Refuse(
                431, ErrorCode.INVALID_ARGUMENT, f"the head is over {settings.max_head_bytes} bytes"
            )
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        previous = self._headers.get(key)
        if previous is None:
            self._headers[key] = text
        else:  # joined once the head is whole: linear in the number of repeats
            self._repeated.setdefault(key, [previous]).append(text)

    def on_headers_complete(self) -> None:
        self._in_head = False
        settings = self._settings
        self._deadline_s = self._loop.time() + settings.body_timeout_s
        parser = self._parser
        version = parser.get_http_version()
        if version not in _VERSIONS:
            raise _Refuse(
                505, ErrorCode.INVALID_ARGUMENT, f"HTTP/{version} is not supported; use HTTP/1.1"
            )
        headers = self._headers
        for key, values in self._repeated.items():
            headers[key] = ", ".join(values)
        self._http10 = version == "1.0"
        self._keep_alive = _keeps_alive(version, headers.get("connection"))
        method = parser.get_method().decode("ascii")
        target = b"".join(self._url)
        path = _path_of(target)
        if self._http10 is False and "host" not in headers:
            raise _Refuse(400, ErrorCode.INVALID_ARGUMENT, "an HTTP/1.1 request needs a Host")
        if "host" in self._repeated:
            raise _Refuse(400, ErrorCode.INVALID_ARGUMENT, "more than one Host header field")
        try:
            match = self._shared.routes.match(method, path)
        except NoRoute as missing:
            self._early = _no_route(method, path, missing.allowed)
            return
        self._match = match
        length = headers.get("content-length")
        if length is not None and int(length) > settings.max_body_bytes:
            raise _Refuse(413, ErrorCode.PAYLOAD_TOO_LARGE, _too_large(settings.max_body_bytes))
        expect = headers.get("expect")
        if expect is not None and expect.lower() != "100-continue":
            self._early = _refused(417, ErrorCode.INVALID_ARGUMENT, "unsupported expectation")
            return
        route = match.route
        identity: object = None
        if route.keyed:
            try:
                identity = self._shared.routes.check_head(headers)
            except OrchestratorError as error:
                self._early = error_answer(error)
                self._early_counted = route.counted
                return
        self._identity = identity
        self._keep_body = route.reads_body
        transport = self._transport
        if expect is not None and self._task is None and not self._queue and transport:
            transport.write(_CONTINUE)  # interim: not part of the answer

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        limit = self._settings.max_body_bytes
        if self._body_bytes > limit:  # a chunked body that outgrew the limit
            raise _Refuse(413, ErrorCode.PAYLOAD_TOO_LARGE, _too_large(limit))
        if self._keep_body and self._early is None:
            self._body.append(body)

    def on_message_complete(self) -> None:
        match = self._match
        if self._early is not None or match is None:
            pending = _Pending(None, None, self._early, self._keep_alive, self._http10,
                               self._early_counted)  # fmt: skip
        else:
            target = b"".join(self._url)
            path = _path_of(target)
            query = target.partition(b"?")[2].decode("latin-1")
            body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
            request = Request(
                self._parser.get_method().decode("ascii"),
                path,
                query,
                self._headers,
                body,
                match.params,
                self._identity,
            )
            pending = _Pending(match, request, None, self._keep_alive, self._http10)
        self._queue.append(pending)
        self._body = []
        self._timeout_status = 0
        if self._task is not None and not self._paused and self._transport is not None:
            self._paused = True  # one whole request waits at most; read on after the answer
            self._transport.pause_reading()

    # -- for the server ------------------------------------------------------------------------

    def close_when_idle(self) -> bool:
        """Close now if idle and say False, else close after the current answer and say True."""
        self._closing = True
        if self._task is None:
            self.abort()
            return False
        return True

    def drained(self) -> asyncio.Future[None]:
        if self._done is None:
            self._done = self._loop.create_future()
        return self._done

    def expire_if_past(self, now_s: float) -> None:
        """The sweep: close an idle connection, or answer 408 to a request read too slowly."""
        if self._task is not None or self._queue or now_s < self._deadline_s:
            return
        if self._timeout_status and self._parsing:
            self._stop_parsing(
                _refused(408, ErrorCode.DEADLINE_EXCEEDED, "the request was not sent in time")
            )
            self._next()
        else:
            self.abort()

    def abort(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.abort()

    # -- serving -------------------------------------------------------------------------------

    def _stop_parsing(self, answer: Answer | None) -> None:
        """No more requests from this connection: answer what is queued, then `answer`, then
        close."""
        self._parsing = False
        if answer is not None:
            self._queue.append(_Pending(None, None, answer, False, self._http10))
        elif self._queue:
            self._queue[-1].keep_alive = False
        else:
            self._closing = True
        if self._transport is not None and not self._paused and not self._lingering:
            self._paused = True
            self._transport.pause_reading()

    def _next(self) -> None:
        """Answer queued requests in order: those decided from their head at once, the next
        routed one in a task."""
        while self._task is None and self._queue:
            pending = self._queue.popleft()
            if pending.answer is not None:
                if pending.counted:
                    self._shared.count(str(pending.answer.status))
                try:
                    self._write_whole(pending.answer, pending.keep_alive, pending.http10)
                except ConnectionResetError:
                    return
                if not pending.keep_alive or self._closing:
                    self._close()
                    return
                continue
            self._task = self._loop.create_task(self._serve(pending))
        if self._task is None:
            if self._closing and not self._queue:
                self._close()
                return
            self._after_answer()

    def _after_answer(self) -> None:
        if self._timeout_status == 0:
            self._deadline_s = self._loop.time() + self._settings.idle_s
        if self._paused and self._parsing and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    async def _serve(self, pending: _Pending) -> None:
        match, request = pending.match, pending.request
        assert match is not None and request is not None
        route = match.route
        count = self._shared.count if route.counted else None
        status = 500
        self._answering = False
        try:
            try:
                answer = await route.handler(request)
                if isinstance(answer, StreamAnswer):
                    status = answer.status
                    await self._relay(answer, pending.keep_alive, pending.http10)
                else:
                    status = answer.status
                    self._write_whole(answer, pending.keep_alive, pending.http10)
            except (ConnectionResetError, asyncio.CancelledError):
                raise
            except Exception as raised:
                error = served_error(raised, method=request.method, path=request.path)
                if self._answering:  # part of an answer is out: only closing can end it
                    status = 500
                    self._closing = True
                else:
                    answer = error_answer(error)
                    status = answer.status
                    self._write_whole(answer, pending.keep_alive, pending.http10)
        except asyncio.CancelledError:
            if count is not None:
                count(CLIENT_CLOSED)
            raise
        except ConnectionResetError:  # the client went away while its answer was written
            if count is not None:
                count(CLIENT_CLOSED)
            self._task = None
            self._close()
            return
        if count is not None:
            count(str(status))
        self._task = None
        self._answering = False
        if self._closing or not pending.keep_alive:
            self._close()
            return
        self._next()

    # -- answers -------------------------------------------------------------------------------

    def _head(self, status: int, fields: bytes, keep_alive: bool) -> bytes:
        date = self._shared.date.line()
        if keep_alive and not self._closing:
            return status_line(status) + fields + date + b"\r\n"
        return status_line(status) + fields + date + b"Connection: close\r\n\r\n"

    def _write_whole(self, answer: Answer, keep_alive: bool, http10: bool) -> None:
        fields = b"".join(header_field(name, value) for name, value in answer.headers)
        if answer.content_type is not None:
            fields += b"Content-Type: " + answer.content_type.encode("latin-1") + b"\r\n"
        if http10 and keep_alive:
            fields += b"Connection: keep-alive\r\n"
        fields += b"Content-Length: %d\r\n" % len(answer.body)
        self._write(self._head(answer.status, fields, keep_alive) + answer.body)

    async def _relay(self, answer: StreamAnswer, keep_alive: bool, http10: bool) -> None:
        """Each piece of the stream as one HTTP chunk (to an HTTP/1.0 client: raw bytes, and the
        connection's end ends the body). Nothing waits for a slow client; see the module doc."""
        chunks = answer.chunks
        fields = b"".join(header_field(name, value) for name, value in answer.headers)
        if http10:
            self._closing = True
            pending = self._head(answer.status, fields, False)
        else:
            pending = self._head(answer.status, fields + b"Transfer-Encoding: chunked\r\n",
                                 keep_alive)  # fmt: skip
        cap = self._settings.stream_buffer_bytes
        ended = False
        try:
            async for chunk in chunks:
                if not chunk:
                    continue
                if http10:
                    data = pending + chunk
                else:
                    data = pending + b"%x\r\n" % len(chunk) + chunk + b"\r\n"
                    if chunks.finished:  # the last bytes: end the body in the same write
                        data += _LAST_CHUNK
                        ended = True
                pending = b""
                self._write(data)
                if not ended and self._behind() > cap:
                    await chunks.aclose()
                    self._cut(answer, http10)
                    return
            if not ended:
                self._write(pending if http10 else pending + _LAST_CHUNK)
        finally:
            await chunks.aclose()

    def _behind(self) -> int:
        """Bytes written to this client that it has not read yet (held in the transport)."""
        transport = self._transport
        return 0 if transport is None else transport.get_write_buffer_size()

    def _cut(self, answer: StreamAnswer, http10: bool) -> None:
        """End a stream whose client fell behind: its cut event, the last chunk, close."""
        event = answer.on_cut() if answer.on_cut is not None else b""
        if http10:
            self._write(event)
        elif event:
            self._write(b"%x\r\n" % len(event) + event + b"\r\n" + _LAST_CHUNK)
        else:
            self._write(_LAST_CHUNK)
        self._closing = True
        log.info("cut a stream: the client reads too slowly")
        self._loop.call_later(self._settings.cut_grace_s, self.abort)

    def _write(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        self._answering = True
        transport.write(data)

    def _close(self) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            if self._lingering:  # end our side; the client reads the answer, then closes
                if transport.can_write_eof():
                    transport.write_eof()
                self._loop.call_later(LINGER_S, self.abort)
            else:
                transport.close()
        self._finished()

    def _finished(self) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result(None)


def _path_of(target: bytes) -> str:
    """The path of a request target in origin form (`/v1/x?q`) or absolute form
    (`http://host/v1/x`), which RFC 9112 section 3.2.2 requires servers to accept."""
    if target.startswith(b"/"):
        return target.split(b"?", 1)[0].decode("latin-1")
    try:
        path = httptools.parse_url(target).path
    except httptools.HttpParserInvalidURLError:
        return ""
    return "/" if path is None else path.decode("latin-1")


def _keeps_alive(version: str, connection: str | None) -> bool:
    """RFC 9112 section 9.3: HTTP/1.1 persists unless `close` is a token of `Connection`;
    HTTP/1.0 only with a `keep-alive` token."""
    if connection is None:
        return version == "1.1"
    tokens = set() if connection is None else {t.strip().lower() for t in connection.split(",")}
    if "close" in tokens:
        return False
    return version == "1.1" or "keep-alive" in tokens


def _refused(status: int, code: ErrorCode, message: str) -> Answer:
    return error_answer(OrchestratorError(code, message), status)


def _bad_request(message: str) -> Answer:
    return error_answer(OrchestratorError(ErrorCode.INVALID_ARGUMENT, message))


def _too_large(limit: int) -> str:
    return f"the request body is larger than {limit} bytes"


def _too_large_head(limit: int) -> Answer:
    return _refused(431, ErrorCode.INVALID_ARGUMENT, f"the request head is over {limit} bytes")


def _no_route(method: str, path: str, allowed: tuple[str, ...]) -> Answer:
    if not allowed:
        return error_answer(OrchestratorError(ErrorCode.NOT_FOUND, f"no route for {path[:200]}"))
    answer = _refused(405, ErrorCode.METHOD_NOT_ALLOWED, f"{method} is not allowed on {path[:200]}")
    answer.headers = (("Allow", ", ".join(allowed)),)
    return answer
