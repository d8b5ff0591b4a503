"""The router's HTTP/1.1 server connection: llhttp (`httptools`) parses every request, a route
table picks its handler, and answers are framed here. Plaintext and TLS (asyncio's SSL
transport) connections run this same code.

Per RFC 9112 and aiohttp's limits: anything llhttp refuses (bad request line, bad field name or
value, obsolete line folding, bare LF, `Transfer-Encoding` with `Content-Length`, an unknown
transfer coding) is a 400 that closes the connection; versions other than HTTP/1.0 and 1.1 get
505; more than `max_fields` fields, a field or target over `max_field_bytes` or a head over
`max_head_bytes` get 431 (414 for the target); a body over the limit gets 413, and a keyed route
whose head check (the API key) fails gets 401, at once, from the head: either way no byte of the
body is kept (the rest is read and dropped for up to `LINGER_S`, so the client sees the answer,
not a reset) and the connection closes. Requests are answered in order (pipelining), one at a
time; while one is served, reading pauses once the next is whole. Requests refused as malformed
are logged at a bounded rate, with llhttp's reason and never the request's bytes.

Timeouts, one policy: a connection without a request in progress is closed after `idle_s`; once
a request's first byte arrives its whole head must arrive within `head_timeout_s` and then its
body within `body_timeout_s` (bytes trickling in do not extend either); past them the client gets
408 and the connection closes. Slow readers: nothing waits on a client. Bytes it has not read
build up in the transport; a stream whose client is more than `stream_buffer_bytes` behind is
cut (its source closed, the answer's terminal error event and the last chunk queued, the
connection closed, and aborted after `cut_grace_s` if the client still has not read). Past
`write_buffer_bytes` unread (`pause_writing`), the connection reads and answers nothing more
until the client catches up, so a pipelining client that never reads holds that much at most,
and is dropped once it has read nothing for `write_stall_s`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from typing import TYPE_CHECKING, Final, cast

import httptools

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.log_limit import RateLimitedLog
from orchestrator.core.openai_errors import served_error
from orchestrator.frontends.http.framing import (
    LAST_CHUNK,
    chunk,
    cut_end,
    stream_head,
    whole_answer,
)
from orchestrator.frontends.http.limits import ConnectionSettings
from orchestrator.frontends.http.messages import Answer, StreamAnswer, error_answer
from orchestrator.frontends.http.request_reader import (
    Pending,
    Refuse,
    RequestReader,
    bad_request,
    refused,
    too_large_head,
)

if TYPE_CHECKING:
    from orchestrator.frontends.http.connections import Connections

__all__ = ["CLIENT_CLOSED", "ConnectionSettings", "HttpConnection"]

log = logging.getLogger(__name__)
_parse_errors = RateLimitedLog(log)  # any client can send malformed requests, as many as it likes

CLIENT_CLOSED: Final = "499"  # the code counted for a request whose client went away (nginx's)
_CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"
LINGER_S: Final = 5.0  # after a 413, how long the rest of the body is read and dropped
LINGER_BYTES: Final = 64 * 1024 * 1024  # and how much of it at most


class HttpConnection(asyncio.Protocol):
    """One client connection, plaintext or TLS."""

    def __init__(self, shared: Connections) -> None:
        self._shared = shared
        self._settings = shared.settings
        self._reader = RequestReader(self, shared.routes, shared.settings)
        self._parser = self._reader.parser
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._deadline_s = float("inf")
        self._timeout_status = 0  # 0 while idle, else 408 once a request is being read
        self._head_bytes = 0  # read while a head is incomplete
        # serving
        self._queue: deque[Pending] = deque()
        self._task: asyncio.Task[None] | None = None
        self._parsing = True  # False once the parser stopped (error, upgrade): no more requests
        self._closing = False
        self._paused = False
        self._write_paused = False  # the client is `write_buffer_bytes` behind: wait for it
        self._stalled_since_s = 0.0
        self._answering = False  # bytes of the current answer have been written
        self._lingering = False  # a 413 is out: drop what the client still sends, then close
        self._lingered_bytes = 0
        self._done: asyncio.Future[None] | None = None

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._transport.set_write_buffer_limits(high=self._settings.write_buffer_bytes)
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
        reader = self._reader
        if reader.in_head:
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as error:
            cause = error.__context__
            if isinstance(cause, Refuse):
                match = reader.match
                if match is not None and match.route.counted:
                    self._shared.count(str(cause.answer.status))
                # A client still sending a body (too large, or keyless) would see a reset, not
                # the answer, if the connection closed under it: read on and drop the rest.
                self._lingering = cause.unread
                self._stop_parsing(cause.answer)
            else:  # a bug: its type only, never the request's bytes
                _parse_errors("unhandled %s reading a request", type(cause).__name__)
                internal = OrchestratorError(ErrorCode.INTERNAL, "internal server error")
                self._stop_parsing(error_answer(internal))
        except httptools.HttpParserUpgrade:
            self._stop_parsing(None)  # answered as plain HTTP; the connection closes after it
        except httptools.HttpParserError as refused:  # own name: mypyc types each `as` name once
            reason = _parser_reason(refused)
            _parse_errors("refused a malformed request: %s", reason)
            self._stop_parsing(bad_request(f"malformed HTTP request: {reason}"))
        else:
            if reader.in_head and self._head_bytes > self._settings.max_head_bytes:
                self._stop_parsing(too_large_head(self._settings.max_head_bytes))
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

    def pause_writing(self) -> None:
        """The client is `write_buffer_bytes` behind: read and answer nothing more until it
        catches up (a stream in progress goes on, under its own cap)."""
        self._write_paused = True
        self._stalled_since_s = self._loop.time()
        if not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._task is None:
            self._next()

    # -- the reader's sink ---------------------------------------------------------------------

    def request_begun(self) -> None:
        self._head_bytes = 0
        self._timeout_status = 408
        self._deadline_s = self._loop.time() + self._settings.head_timeout_s

    def head_read(self, expects_continue: bool) -> None:
        self._deadline_s = self._loop.time() + self._settings.body_timeout_s
        transport = self._transport
        if expects_continue and self._task is None and not self._queue and transport:
            transport.write(_CONTINUE)  # interim: not part of the answer

    def request_read(self, pending: Pending) -> None:
        self._queue.append(pending)
        self._timeout_status = 0
        busy = self._task is not None or self._write_paused
        if busy and not self._paused and self._transport is not None:
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
        """The sweep: drop a client that read nothing for `write_stall_s` while behind, close an
        idle connection, or answer 408 to a request read too slowly."""
        if self._write_paused:
            if now_s - self._stalled_since_s >= self._settings.write_stall_s:
                self.abort()
            return
        if self._task is not None or self._queue or now_s < self._deadline_s:
            return
        if self._timeout_status and self._parsing:
            self._stop_parsing(
                refused(408, ErrorCode.DEADLINE_EXCEEDED, "the request was not sent in time")
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
            self._queue.append(Pending(None, None, answer, False, self._reader.http10))
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
        while self._task is None and self._queue and not self._write_paused:
            pending = self._queue.popleft()
            if pending.answer is not None:
                try:
                    self._write_whole(pending.answer, pending.keep_alive, pending.http10)
                except ConnectionResetError:
                    return
                if not pending.keep_alive or self._closing:
                    self._close()
                    return
                continue
            self._task = self._loop.create_task(self._serve(pending))
        if self._task is None and not self._queue:
            if self._closing:
                self._close()
                return
            self._after_answer()

    def _after_answer(self) -> None:
        if self._timeout_status == 0:
            self._deadline_s = self._loop.time() + self._settings.idle_s
        if self._write_paused:  # read on once the client has read (`resume_writing`)
            return
        if self._paused and self._parsing and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    async def _serve(self, pending: Pending) -> None:
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
                    try:
                        self._write_whole(answer, pending.keep_alive, pending.http10)
                    finally:
                        if answer.on_written is not None:
                            answer.on_written()
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
                # `error` is often `raised` itself, whose traceback holds this frame: kept, it
                # would tie the request's body to a cycle only a collection frees.
                del error
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

    def _write_whole(self, answer: Answer, keep_alive: bool, http10: bool) -> None:
        date = self._shared.date.line()
        self._write(whole_answer(answer, date, keep_alive, http10, self._closing))

    async def _relay(self, answer: StreamAnswer, keep_alive: bool, http10: bool) -> None:
        """Each piece of the stream as one HTTP chunk (to an HTTP/1.0 client: raw bytes, and the
        connection's end ends the body). Nothing waits for a slow client; see the module doc."""
        chunks = answer.chunks
        self._closing = self._closing or http10
        pending = stream_head(answer, self._shared.date.line(), keep_alive and not self._closing,
                              http10)  # fmt: skip
        cap = self._settings.stream_buffer_bytes
        ended = cut = False
        failure: BaseException | None = None
        try:
            async for piece in chunks:
                if not piece:
                    continue
                data = pending + chunk(piece, http10)
                if chunks.finished and not http10:  # the last bytes: end the body in this write
                    data += LAST_CHUNK
                    ended = True
                pending = b""
                self._write(data)
                if not ended and self._behind() > cap:
                    cut = True
                    break
            else:
                if not ended:
                    self._write(pending if http10 else pending + LAST_CHUNK)
        except BaseException as raised:
            failure = raised
        # The source is closed outside any `except` or `finally`: compiled (mypyc), a coroutine
        # suspended there leaves its exception as the thread's, and a later coroutine's
        # `finally` raised that stale exception (a finished stream's connection was closed).
        await chunks.aclose()
        if failure is not None:
            try:
                raise failure
            finally:  # its traceback holds this frame: kept here, the two would form a cycle
                failure = None
        if cut:
            self._cut(answer, http10)

    def _behind(self) -> int:
        """Bytes written to this client that it has not read yet (held in the transport)."""
        transport = self._transport
        return 0 if transport is None else transport.get_write_buffer_size()

    def _cut(self, answer: StreamAnswer, http10: bool) -> None:
        """End a stream whose client fell behind: its terminal event, the last chunk, close."""
        self._write(cut_end(answer.on_cut() if answer.on_cut is not None else b"", http10))
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


def _parser_reason(error: httptools.HttpParserError) -> str:
    """llhttp's reason for refusing a request, without the bytes it quotes (a key, a prompt)."""
    return str(error).split(":", 1)[0][:80] or type(error).__name__
