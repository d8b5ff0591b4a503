"""A replica's SSE stream relayed to the client as it arrives, continued on another replica when
the first one fails, stalls or is drained mid-stream (`continuation.py` and
`responses_continuation.py` hold the rewriting).

The relay yields whole events only: a partial event is held back until its end arrives, so the
client's stream can always go on (with a continuation's events, or the terminal error event)
from an event boundary.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Protocol

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.forwarding.attempts import Attempt, Ledger, UpstreamErrorKind
from orchestrator.forwarding.continuation import (
    EVENT_END,
    EventSplicer,
    NotContinuable,
    StreamTranscript,
)
from orchestrator.forwarding.event_stream import COMPLETIONS_FRAMING, DONE_EVENT, Framing
from orchestrator.forwarding.upstream import (
    UpstreamDisconnected,
    UpstreamMalformed,
    UpstreamResponse,
)

DRAIN_AFTER_DONE_S: Final = 1.0  # a replica ends its body this soon after [DONE], or is dropped
KEPT_BYTES: Final = 64 * 1024  # relayed bytes kept raw before they are folded into the transcript


class MigrationReason(StrEnum):
    """Why a stream moved: the `reason` label of the migration counter."""

    DISCONNECT = "disconnect"  # the connection broke (or the answer broke its framing)
    STALL = "stall"  # no chunk for longer than the stall timeout
    DRAIN = "drain"  # the replica is draining or left the table


class UpstreamStalled(UpstreamDisconnected):
    """No chunk arrived within the longest gap allowed between chunks."""


class UpstreamDrained(UpstreamDisconnected):
    """The replica is draining (or left the table): the stream moves elsewhere."""


@dataclass(frozen=True, slots=True)
class Moved:
    """A continuation that started: its attempt, its response and its first bytes."""

    attempt: Attempt
    response: UpstreamResponse
    first: bytes


class Mover(Protocol):
    """Continues a stream elsewhere (the dispatcher's side of a migration)."""

    request: bytes  # the client's body

    def transcript(self) -> StreamTranscript:
        """A fresh transcript of the stream, in its API's terms."""

    def track(self, relay: StreamRelay, replica_id: str | None) -> None:
        """The relay now reads from `replica_id` (None: it ended)."""

    async def move(self, body: bytes, reason: MigrationReason) -> Moved | None:
        """Start `body` on a replica not tried yet; None when none could take it."""


class _StallWatch:
    """Fails the response when no chunk came for `stall_s`; a chunk only stores the time.

    Bytes that arrived but are not read yet (a slow client holds the relay back) are not a
    stall: the replica is fine, and the client's own slow-reader bound applies instead.
    """

    __slots__ = ("_handle", "_loop", "_response", "_stall_s", "last_s")

    def __init__(self, response: UpstreamResponse, stall_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._response = response
        self._stall_s = stall_s
        self.last_s = self._loop.time()
        self._handle = self._loop.call_at(self.last_s + stall_s, self._check)

    def _check(self) -> None:
        if self._response.unread:
            self.last_s = self._loop.time()
        due_s = self.last_s + self._stall_s
        if self._loop.time() >= due_s:
            self._response.fail(UpstreamStalled(f"no chunk for {self._stall_s:.3g} s"))
        else:
            self._handle = self._loop.call_at(due_s, self._check)

    def saw_chunk(self) -> None:
        self.last_s = self._loop.time()

    def cancel(self) -> None:
        self._handle.cancel()


class StreamRelay:
    """An upstream SSE stream as an async iterator of byte chunks, relayed as they arrive.

    The stream ends with the replica's body or, sooner, once a chunk that ends the stream in its
    framing (`data: [DONE]`, or the Responses API's terminal event) has been yielded: the answer
    is whole then, and a client that hangs up as soon as it reads that (as the official client
    does) has had all of it. The replica's end of the body is then awaited in the background, to
    keep the connection.

    Tokens are counted as output events (no JSON parsing per chunk); the usage at the end, when
    there is one, gives the exact count. A failure after the first chunk continues the stream on
    another replica when `mover` is given and the stream can be continued; else it yields one
    last chunk holding the terminal error event of the framing. `aclose()` closes the upstream
    connection (so the replica aborts) unless the stream already ended; calling it more than once
    is harmless. `on_end`, when set, is called once with the stream's output tokens when it ends.
    """

    __slots__ = (
        "_attempt",
        "_carry",
        "_done",
        "_end_watch",
        "_events",
        "_first",
        "_framing",
        "_kept",
        "_last",
        "_ledger",
        "_moved_tokens",
        "_mover",
        "_previous",
        "_response",
        "_splicer",
        "_stall_s",
        "_transcript",
        "_unsent",
        "_watch",
        "head",
        "on_end",
    )  # fmt: skip

    def __init__(
        self,
        ledger: Ledger,
        attempt: Attempt,
        response: UpstreamResponse,
        first: bytes,
        framing: Framing = COMPLETIONS_FRAMING,
        *,
        mover: Mover | None = None,
        stall_timeout_s: float | None = None,
    ) -> None:
        self._ledger = ledger
        self._attempt = attempt
        self._framing = framing
        self._response: UpstreamResponse | None = response
        self._first: bytes | None = first
        self.head = first  # the stream's first bytes (a response's id is in them)
        self._events = framing.counted_events(first)
        if self._events:  # TTFT at the first output event (a Responses head carries none)
            ledger.first_token(attempt)
        self._previous = b""
        self._last = first
        self._unsent = False  # the chunk last yielded never reached the client
        self._end_watch = framing.end_watch()
        self._done = self._end_watch.ends(first)  # the stream's last event has been yielded
        self._carry = b""  # a partial event held back
        self._mover = mover
        self._transcript = None if mover is None else mover.transcript()
        self._kept = bytearray()  # relayed bytes not folded into the transcript yet
        self._splicer: EventSplicer | None = None
        self._moved_tokens = 0  # output tokens that earlier attempts made
        self._stall_s = stall_timeout_s
        self._watch = None if stall_timeout_s is None else _StallWatch(response, stall_timeout_s)
        if mover is not None:
            mover.track(self, attempt.replica.replica_id)
        self.on_end: Callable[[int], None] | None = None

    def __aiter__(self) -> StreamRelay:
        return self

    @property
    def finished(self) -> bool:
        """Every byte of the stream has been yielded: the next step ends it without waiting."""
        response = self._response
        if self._first is not None or self._carry:
            return False
        return self._done or response is None or (response.finished and self._splicer is None)

    async def __anext__(self) -> bytes:
        if self._first is not None:
            first, self._first = self._first, None
            data = self._whole_events(first)
            if data:
                return self._sent(data)
        while True:
            response = self._response
            if response is None:
                raise StopAsyncIteration
            if self._done:
                self._end(ok=True)
                raise StopAsyncIteration
            try:
                data = await response.read_some()
            except TimeoutError:
                self._end(ok=False)
                return self.error_event(_deadline_error())
            except UpstreamDrained:
                chunk = await self._move_on(MigrationReason.DRAIN, None, "the replica drained")
            except UpstreamStalled:
                kind, reason = UpstreamErrorKind.STALL, MigrationReason.STALL
                chunk = await self._move_on(reason, kind, "the replica stalled mid-stream")
            except UpstreamMalformed:
                kind, reason = UpstreamErrorKind.MALFORMED, MigrationReason.DISCONNECT
                message = "the replica's stream broke its framing"
                chunk = await self._move_on(reason, kind, message, ErrorCode.BAD_GATEWAY)
            except UpstreamDisconnected:
                kind, reason = UpstreamErrorKind.DISCONNECT, MigrationReason.DISCONNECT
                chunk = await self._move_on(reason, kind, "the replica failed mid-stream")
            except BaseException:
                self._end(ok=False)
                raise
            else:
                if not data:
                    rest = self._carry + (b"" if self._splicer is None else self._splicer.rest())
                    self._carry = b""
                    self._end(ok=True)
                    if rest:
                        return self._sent(rest)
                    raise StopAsyncIteration
                if self._watch is not None:
                    self._watch.saw_chunk()
                data = self._whole_events(data)
                if data:
                    return self._sent(data)
                continue
            if chunk is not None:
                return chunk

    async def aclose(self) -> None:
        self._end(ok=False)

    def move_off(self) -> None:
        """Continue this stream elsewhere at the next chunk (its replica is draining)."""
        if self._response is not None and self._mover is not None:
            self._response.fail(UpstreamDrained("the replica is draining"))

    def error_event(self, error: OrchestratorError) -> bytes:
        """The terminal event that ends this stream with `error`, numbered after what was sent."""
        sent = self._previous if self._unsent else self._previous + self._last
        return self._framing.error_event(error, sent)

    def unsent(self) -> None:
        """The chunk last yielded was not passed on: the terminal event follows the one before."""
        self._unsent = True

    # -- internals -----------------------------------------------------------------------------

    def _whole_events(self, data: bytes) -> bytes:
        """What of `data` (after what was held back) ends on an event boundary; the rest is
        held back. A continuation's bytes go through its splicer instead."""
        if self._splicer is not None:
            return self._splicer.feed(data)
        if self._carry:
            data, self._carry = self._carry + data, b""
        if data.endswith(EVENT_END):
            return data
        cut = data.rfind(EVENT_END)
        self._carry = data[cut + 2 :] if cut >= 0 else data
        return data[: cut + 2] if cut >= 0 else b""

    def _sent(self, data: bytes) -> bytes:
        """Account for `data`, about to be yielded."""
        counted = self._framing.counted_events(data)
        if counted and not self._events:
            self._ledger.first_token(self._attempt)
        self._events += counted
        self._previous, self._last = self._last, data
        self._done = self._end_watch.ends(data)
        transcript = self._transcript
        if transcript is not None:  # spliced bytes too: a continuation may move again
            self._kept += data
            if len(self._kept) > KEPT_BYTES:
                transcript.feed(bytes(self._kept))
                self._kept.clear()
        return data

    async def _move_on(
        self,
        reason: MigrationReason,
        kind: UpstreamErrorKind | None,
        message: str,
        code: ErrorCode = ErrorCode.UNAVAILABLE,
    ) -> bytes | None:
        """Continue on another replica (None: moved, read on) or end with the error event."""
        failed = self._attempt.replica
        if kind is not None:
            self._ledger.upstream_error(failed, kind)
        error = OrchestratorError(code, message)
        mover, transcript = self._mover, self._transcript
        if mover is None or transcript is None:
            self._end(ok=False, replica_failed=kind is not None)
            return self.error_event(error)
        transcript.feed(bytes(self._kept))
        self._kept.clear()
        try:
            body = transcript.continuation(mover.request)
        except NotContinuable:
            self._ledger.migrated(reason, "impossible")
            self._end(ok=False, replica_failed=kind is not None)
            return self.error_event(error)
        sent_tokens = transcript.output_events
        self._close_attempt(ok=False, replica_failed=kind is not None, tokens=sent_tokens)
        started_s = self._ledger.now()
        try:
            moved = await mover.move(body, reason)
        except BaseException:  # cancelled (the client left) or broken: still end the stream once
            self._ended(sent_tokens)
            raise
        if moved is None:
            self._ledger.migrated(reason, "failed")
            self._ended(sent_tokens)
            return self.error_event(error)
        self._ledger.migrated(reason, "continued", self._ledger.now() - started_s)
        self._attempt, self._response = moved.attempt, moved.response
        self._moved_tokens = sent_tokens
        self._splicer = transcript.splicer(mover.request)
        self._carry = b""  # a partial event the client never saw
        self._first = None
        if self._stall_s is not None:
            self._watch = _StallWatch(moved.response, self._stall_s)
        mover.track(self, moved.attempt.replica.replica_id)
        data = self._splicer.feed(moved.first)
        return self._sent(data) if data else None

    def _close_attempt(self, *, ok: bool, replica_failed: bool, tokens: int | None = None) -> int:
        """End the current attempt; returns the stream's output tokens so far."""
        response, self._response = self._response, None
        if response is None:
            return 0
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if ok:
            response.release(drain_s=DRAIN_AFTER_DONE_S)
        else:
            response.close()
        if tokens is None:
            tail = self._previous + self._last
            tokens = self._framing.output_tokens(tail)
            if tokens is None:
                tokens = max(0, self._events - (1 if DONE_EVENT in tail else 0))
        self._ledger.close(
            self._attempt,
            ok=ok,
            output_tokens=max(0, tokens - self._moved_tokens),
            replica_failed=replica_failed,
            stream=True,
        )
        return tokens

    def _end(self, *, ok: bool, replica_failed: bool = False) -> None:
        if self._response is None:
            return
        self._ended(self._close_attempt(ok=ok, replica_failed=replica_failed))

    def _ended(self, tokens: int) -> None:
        if self._mover is not None:
            self._mover.track(self, None)
        on_end, self.on_end = self.on_end, None
        if on_end is not None:
            on_end(tokens)


def _deadline_error() -> OrchestratorError:
    return OrchestratorError(
        ErrorCode.DEADLINE_EXCEEDED, "the request did not finish before its deadline"
    )
