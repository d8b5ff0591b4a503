"""The completions fast lane: well-formed HTTP/1.1 completion requests served straight off the
socket, everything else handed to aiohttp, on the same listening port.

aiohttp's server machinery (request and response objects, router, middleware, writer) cost the
router about as much per request as routing and forwarding together. A connection here starts in
the fast lane, which serves `POST /v1/completions` and `POST /v1/chat/completions` carrying a
`Content-Length` body within the limit, through the same `OpenAiFrontend.forward` as the aiohttp
handlers, and writes each answer with one `transport.write`. At the first request it does not
serve that way (another route or method, a chunked or oversized body, `Expect`, `Upgrade`,
HTTP/1.0, a malformed head), it hands the connection, with the bytes it holds, to aiohttp's
request handler for good, so every unusual case keeps aiohttp's behaviour and error answers.

Contracts kept from the aiohttp handlers: the replica's body or SSE bytes pass unchanged (a
stream is re-framed in chunked coding only), the same headers and status, the same error bodies,
a client that goes away cancels its request (and so its upstream request), a client more than
`stream_buffer_bytes` behind a stream has it cut (an error event, then the connection closes,
and the upstream request is cancelled), a 429 carries `Retry-After`, and every request is
counted once by its code.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import time
from collections.abc import Callable
from email.utils import formatdate
from http import HTTPStatus
from typing import Final, cast

from aiohttp import web

from orchestrator.admission.errors import Refused
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.openai_errors import openai_error
from orchestrator.forwarding.dispatcher import StreamRelay, UpstreamReply
from orchestrator.frontends.http.app import (
    CHAT_PATH,
    CLIENT_CLOSED,
    COMPLETIONS_PATH,
    OPENAI_FRONTEND,
    REPLICA_HEADER,
    RETRY_AFTER,
    STREAM_HEADERS,
    OpenAiFrontend,
)

log = logging.getLogger(__name__)

MAX_HEAD_BYTES: Final = 16 * 1024  # a longer head goes to aiohttp, which answers it
KEEPALIVE_S: Final = 75.0  # an idle client connection is closed after this long (as aiohttp's)
SHUTDOWN_GRACE_S: Final = 60.0  # answers in progress may finish within this at shutdown (same)
_SWEEP_EVERY_S: Final = 15.0
CUT_GRACE_S: Final = 5.0  # a cut stream's connection is aborted if its client has not read by then
MAX_REPLICA_FIELDS: Final = 4096  # header lines kept per replica id (then the cache starts over)
_REQUEST_LINES: Final = {
    b"POST " + COMPLETIONS_PATH.encode() + b" HTTP/1.1": COMPLETIONS_PATH,
    b"POST " + CHAT_PATH.encode() + b" HTTP/1.1": CHAT_PATH,
}
_FIELD: Final = re.compile(r"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([\t\x20-\x7e]*)")
_HANDED_TO_AIOHTTP: Final = frozenset({"transfer-encoding", "expect", "upgrade"})
_SINGLE: Final = frozenset({"content-length", "authorization", "host"})
_STREAM_FIELDS: Final = b"".join(
    b"%s: %s\r\n" % (name.encode(), value.encode()) for name, value in STREAM_HEADERS.items()
)
_LAST_CHUNK: Final = b"0\r\n\r\n"


class FastLane:
    """What a site's fast-lane connections share: the frontend, aiohttp's request-handler
    factory for the hand-off, and the open connections (to close idle ones and at shutdown)."""

    def __init__(self, frontend: OpenAiFrontend, fallback: Callable[[], asyncio.Protocol]) -> None:
        self.frontend = frontend
        self.fallback = fallback
        self.max_body_bytes = frontend.settings.max_body_bytes
        self.stream_buffer_bytes = frontend.settings.stream_buffer_bytes
        self.connections: set[FastLaneConnection] = set()
        self._sweep: asyncio.TimerHandle | None = None
        self._date_s = -1
        self._date_field = b""
        self._replica_fields: dict[str, bytes] = {}

    def start(self) -> None:
        self._sweep = asyncio.get_running_loop().call_later(_SWEEP_EVERY_S, self._close_idle)

    async def stop(self, grace_s: float) -> None:
        """Close idle connections now and busy ones after their current answer, waiting up to
        `grace_s` for them before closing what is left (which cancels its requests)."""
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        busy = [c.drained() for c in list(self.connections) if c.close_when_idle()]
        if busy:
            await asyncio.wait(busy, timeout=grace_s)
        for connection in list(self.connections):
            connection.abort()

    def date_field(self) -> bytes:
        """The `Date` header line, made once a second."""
        now_s = int(time.time())
        if now_s != self._date_s:
            self._date_s = now_s
            self._date_field = b"Date: " + formatdate(now_s, usegmt=True).encode() + b"\r\n"
        return self._date_field

    def replica_field(self, replica_id: str) -> bytes:
        field = self._replica_fields.get(replica_id)
        if field is None:
            if len(self._replica_fields) >= MAX_REPLICA_FIELDS:
                self._replica_fields.clear()
            field = _field(REPLICA_HEADER, replica_id)
            self._replica_fields[replica_id] = field
        return field

    def _close_idle(self) -> None:
        loop = asyncio.get_running_loop()
        cutoff_s = loop.time() - KEEPALIVE_S
        for connection in list(self.connections):
            connection.close_if_idle_since(cutoff_s)
        self._sweep = loop.call_later(_SWEEP_EVERY_S, self._close_idle)


class _Request:
    """A parsed fast-lane request head: what `OpenAiFrontend.forward` needs, and framing."""

    __slots__ = ("body_end", "body_start", "headers", "keep_alive", "path")

    def __init__(
        self, path: str, headers: dict[str, str], keep_alive: bool, body_start: int, size: int
    ) -> None:
        self.path = path
        self.headers = headers  # lower-case names
        self.keep_alive = keep_alive
        self.body_start = body_start  # offsets in the connection's buffer
        self.body_end = body_start + size


def parse_request(buffer: bytes, head_end: int, max_body_bytes: int) -> _Request | None:
    """The request whose head is `buffer[:head_end]`, or None when the fast lane does not serve
    it exactly as aiohttp would (aiohttp gets it then)."""
    line_end = buffer.find(b"\r\n", 0, head_end)
    path = _REQUEST_LINES.get(buffer[: head_end if line_end < 0 else line_end])
    if path is None:
        return None
    fields = buffer[line_end + 2 : head_end] if line_end >= 0 else b""
    if not fields.isascii():  # aiohttp decodes other bytes its own way
        return None
    headers: dict[str, str] = {}
    for line in fields.decode("ascii").split("\r\n") if fields else ():
        match = _FIELD.fullmatch(line)
        if match is None:
            return None
        name, value = match.group(1).lower(), match.group(2).rstrip(" \t")
        if name in headers:
            if name in _SINGLE:
                return None
            headers[name] = f"{headers[name]}, {value}"
        else:
            headers[name] = value
    if not _HANDED_TO_AIOHTTP.isdisjoint(headers):
        return None
    length = headers.get("content-length")
    if length is None or not length.isdigit() or len(length) > 18:
        return None
    size = int(length)
    if size > max_body_bytes:
        return None
    connection = headers.get("connection", "").lower()
    if "upgrade" in connection:
        return None
    return _Request(path, headers, "close" not in connection, head_end + 4, size)


class FastLaneConnection(asyncio.Protocol):
    """One client connection, served in the fast lane until it is handed to aiohttp."""

    def __init__(self, lane: FastLane) -> None:
        self._lane = lane
        self._transport: asyncio.Transport | None = None
        self._buffer = b""
        self._pieces: list[bytes] = []  # a body still arriving, in pieces, after `_buffer`
        self._pieces_size = 0
        self._waiting: _Request | None = None  # a parsed head whose body is still arriving
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._answering = False  # bytes of the current answer have been written
        self._reading_paused = False
        self._done: asyncio.Future[None] | None = None
        self._idle_since_s = 0.0

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._idle_since_s = asyncio.get_running_loop().time()
        self._lane.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self._task is None:
            self._idle_since_s = asyncio.get_running_loop().time()  # bytes are progress
        if self._waiting is not None or self._task is not None:
            self._pieces.append(data)
            self._pieces_size += len(data)
            if self._task is not None:  # pipelined: hold it, and stop reading if it piles up
                if self._pieces_size > self._lane.max_body_bytes and not self._reading_paused:
                    assert self._transport is not None
                    self._reading_paused = True
                    self._transport.pause_reading()
                return
            waiting = self._waiting
            assert waiting is not None
            if len(self._buffer) + self._pieces_size < waiting.body_end:
                return
            data = b""
        self._buffer = self._take_buffer(data)
        self._next_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._lane.connections.discard(self)
        if self._task is not None:
            self._task.cancel()
        self._finished()

    # -- for the lane --------------------------------------------------------------------------

    def close_when_idle(self) -> bool:
        """Close now if idle and say False, else close after the current answer and say True."""
        self._closing = True
        if self._task is None:
            self.abort()
            return False
        return True

    def drained(self) -> asyncio.Future[None]:
        if self._done is None:
            self._done = asyncio.get_running_loop().create_future()
        return self._done

    def close_if_idle_since(self, cutoff_s: float) -> None:
        if self._task is None and self._idle_since_s <= cutoff_s:
            self.abort()

    def abort(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.abort()

    # -- requests ------------------------------------------------------------------------------

    def _take_buffer(self, data: bytes) -> bytes:
        pieces = self._pieces
        if pieces:
            if data:
                pieces.append(data)
            data = b"".join((self._buffer, *pieces))
            pieces.clear()
            self._pieces_size = 0
        elif self._buffer:
            data = self._buffer + data
        return data

    def _next_request(self) -> None:
        """Serve the next whole request in the buffer, or hand the connection on, or wait."""
        if self._closing:
            return
        buffer = self._buffer
        request = self._waiting
        if request is None:
            head_end = buffer.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
            if head_end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    self._hand_off()
                return
            request = parse_request(buffer, head_end, self._lane.max_body_bytes)
            if request is None:
                self._hand_off()
                return
            if len(buffer) < request.body_end:
                self._waiting = request
                return
        elif len(buffer) < request.body_end:
            return
        self._waiting = None
        raw = buffer[request.body_start : request.body_end]
        self._buffer = buffer[request.body_end :]
        self._task = asyncio.get_running_loop().create_task(self._serve(request, raw))

    def _hand_off(self) -> None:
        """From now on aiohttp serves this connection, starting with the bytes held here."""
        transport = self._transport
        assert transport is not None
        self._lane.connections.discard(self)
        data = self._take_buffer(b"")
        self._buffer = b""
        if self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()
        handler = self._lane.fallback()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if data:
            handler.data_received(data)

    async def _serve(self, request: _Request, raw: bytes) -> None:
        frontend = self._lane.frontend
        try:
            try:
                key = frontend.authorize(request.headers.get("authorization"))
                reply = await frontend.forward(request.path, request.headers, raw, key)
                if reply.chunks is None:
                    status = self._write_whole(reply, request.keep_alive)
                else:
                    status = await self._relay(reply, reply.chunks, request.keep_alive)
            except OrchestratorError as error:
                status = self._write_error(error, request.keep_alive)
            except (ConnectionResetError, asyncio.CancelledError):
                raise
            except Exception:
                log.exception("unhandled error serving %s", request.path)
                status = 500
                if self._answering:  # part of an answer is out: only closing can end it
                    self._closing = True
                else:
                    internal = OrchestratorError(ErrorCode.INTERNAL, "internal error")
                    self._write_error(internal, request.keep_alive)
        except asyncio.CancelledError:
            frontend.count(CLIENT_CLOSED)
            raise
        except ConnectionResetError:  # the client went away while its answer was written
            frontend.count(CLIENT_CLOSED)
            self._task = None
            self._close()
            return
        frontend.count(str(status))
        self._task = None
        self._answering = False
        if self._closing or not request.keep_alive:
            self._close()
            return
        transport = self._transport
        assert transport is not None
        self._idle_since_s = asyncio.get_running_loop().time()
        if self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()
        if self._pieces:
            self._buffer = self._take_buffer(b"")
        if self._buffer:
            self._next_request()

    # -- answers -------------------------------------------------------------------------------

    def _write_whole(self, reply: UpstreamReply, keep_alive: bool) -> int:
        body = reply.body or b""
        head = _status_line(reply.status) + self._lane.replica_field(reply.replica.replica_id)
        for name, value in reply.headers.items():
            head += _field(name, value)
        head += b"Content-Length: %d\r\n" % len(body) + self._end_of_head(keep_alive)
        self._write(head + body)
        return reply.status

    def _write_error(self, error: OrchestratorError, keep_alive: bool) -> int:
        status, answer = openai_error(error)
        body = json.dumps(answer).encode()
        head = _status_line(status)
        if isinstance(error, Refused):
            head += _field(RETRY_AFTER, error.retry_after_header)
        head += (
            b"Content-Type: application/json; charset=utf-8\r\n"
            + b"Content-Length: %d\r\n" % len(body)
            + self._end_of_head(keep_alive)
        )
        self._write(head + body)
        return status

    async def _relay(self, reply: UpstreamReply, chunks: StreamRelay, keep_alive: bool) -> int:
        """The replica's SSE bytes as they arrive, each read passed on as one HTTP chunk.

        Nothing waits for a slow client: its unread bytes build up in the transport until they
        pass the cap, and then the stream is cut: the upstream request
        is cancelled, an error event and the last chunk are queued, and the connection closes
        (aborted after `CUT_GRACE_S` if the client still has not read them)."""
        head = _status_line(reply.status) + self._lane.replica_field(reply.replica.replica_id)
        for name, value in reply.headers.items():
            head += _field(name, value)
        pending = head + _STREAM_FIELDS + b"Transfer-Encoding: chunked\r\n"
        pending += self._end_of_head(keep_alive)  # goes out with the first bytes of the body
        ended = False
        try:
            async for chunk in chunks:
                data = pending + b"%x\r\n" % len(chunk) + chunk + b"\r\n"
                pending = b""
                if chunks.finished:  # the last bytes: end the body in the same write
                    data += _LAST_CHUNK
                    ended = True
                self._write(data)
                if not ended and self._behind() > self._lane.stream_buffer_bytes:
                    await chunks.aclose()
                    self._cut()
                    return reply.status
            if not ended:
                self._write(pending + _LAST_CHUNK)
        finally:
            await chunks.aclose()
        return reply.status

    def _behind(self) -> int:
        """Bytes written to this client that it has not read yet (held in the transport)."""
        transport = self._transport
        return 0 if transport is None else transport.get_write_buffer_size()

    def _cut(self) -> None:
        """End a stream whose client fell behind: error event, last chunk, close."""
        event = self._lane.frontend.stream_cut()
        self._write(b"%x\r\n" % len(event) + event + b"\r\n" + _LAST_CHUNK)
        self._closing = True
        log.info("cut a stream: the client reads too slowly")
        asyncio.get_running_loop().call_later(CUT_GRACE_S, self.abort)

    def _end_of_head(self, keep_alive: bool) -> bytes:
        date = self._lane.date_field()
        if keep_alive and not self._closing:
            return date + b"\r\n"
        return date + b"Connection: close\r\n\r\n"

    def _write(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        self._answering = True
        transport.write(data)

    def _close(self) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.close()
        self._finished()

    def _finished(self) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result(None)


class FastLaneSite(web.BaseSite):
    """A TCP site whose connections start in the fast lane; otherwise like `web.TCPSite`.

    The runner must be an `AppRunner` over `build_app`'s application.
    """

    __slots__ = ("_grace_s", "_host", "_lane", "_port", "_reuse_port")

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        *,
        backlog: int = 128,
        reuse_port: bool = False,
        shutdown_grace_s: float = SHUTDOWN_GRACE_S,
    ) -> None:
        super().__init__(runner, backlog=backlog)
        server = runner.server
        assert server is not None  # BaseSite checked that the runner is set up
        self._lane = FastLane(runner.app[OPENAI_FRONTEND], server)
        self._host = host
        self._port = port
        self._reuse_port = reuse_port
        self._grace_s = shutdown_grace_s

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        lane = self._lane
        self._server = await loop.create_server(
            lambda: FastLaneConnection(lane),
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_port=self._reuse_port or None,
        )
        lane.start()

    async def stop(self) -> None:
        await super().stop()
        await self._lane.stop(self._grace_s)


_STATUS_LINES: dict[int, bytes] = {}


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
        line = _STATUS_LINES[status] = b"HTTP/1.1 %d %s\r\n" % (status, reason.encode())
    return line


def _field(name: str, value: str) -> bytes:
    """One header line; a value that would break the head is refused, as aiohttp refuses it."""
    if "\r" in value or "\n" in value:
        raise ValueError(f"newline in the value of header {name}")
    return f"{name}: {value}\r\n".encode()
