"""Carry out a routing decision: send the request body unchanged to the primary replica, move on to
the fallbacks while nothing has reached the client yet, and relay the answer.

Contract of `Dispatcher.dispatch`:

- Before the first byte of a successful answer (for a stream: its first SSE bytes, which the
  replica sends with its first token), a connect error, a 5xx, a dropped connection, a
  malformed answer or an open circuit moves the request to the next fallback (each move counts
  as a retry). When every candidate failed, it raises BAD_GATEWAY (502) if one answered
  malformed, else UNAVAILABLE.
- A 4xx from the replica is the client's answer: returned as it is, never retried.
- Each attempt at a stream has two bounds of its own (`DispatchSettings`): its first byte within
  `first_byte_timeout_s`, else it moves to the next fallback like a failure; and no gap between
  chunks longer than `stall_timeout_s`.
- Once a stream has started, a replica that fails, stalls past that bound or drains moves the
  stream to another replica as a continuation (`stream_relay.py`, `continuation.py`; a Responses
  stream continues as a chat completions continuation rendered as Responses events,
  `responses_continuation.py`), trying at most `migration_attempts` replicas. When it cannot move
  (a tool call under way, a request pinned to one replica, no replica left to try), the stream
  ends with a terminal event in its framing (`event_stream.py`): `data: {"error": ...}` then
  `data: [DONE]` for completions, an `event: error` for the Responses API.
- A request whose context names a replica (`RequestContext.replica_id`: the holder of a stored
  response) goes there and nowhere else; NOT_FOUND when it left the table.
- The absolute `deadline_s` bounds everything, connect and read timeouts included: before the
  first byte its expiry raises DEADLINE_EXCEEDED, mid-stream it ends the stream with an error event.
- Cancelling the caller (a client that went away) or closing `UpstreamReply.chunks` closes the
  upstream connection at once, so the replica aborts the request.
- FleetState sees exactly one `started` and one `finished` per attempt, whatever happens.
- With `settle_later`, a whole answer comes back with its attempt's books still open
  (`UpstreamReply.settle`): the caller writes the answer to its client first and then settles,
  so the bookkeeping is not between the replica's answer and the client's. Nothing else runs
  in between (the same event-loop step), so no other request sees the difference.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from functools import partial
from typing import Final

from orchestrator.core.clock import Clock, MonotonicClock
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.records import Replica, ReplicaState
from orchestrator.core.slo import SloTarget
from orchestrator.forwarding.attempts import Attempt, AttemptFailed, Ledger, UpstreamErrorKind
from orchestrator.forwarding.breaker import CircuitBreakers
from orchestrator.forwarding.continuation import StreamTranscript, Transcript
from orchestrator.forwarding.dispatch_settings import DispatchSettings
from orchestrator.forwarding.event_stream import RESPONSES_PATH, framing_for
from orchestrator.forwarding.metrics import RouterMetrics
from orchestrator.forwarding.responses_continuation import ResponsesTranscript
from orchestrator.forwarding.stream_relay import MigrationReason, Moved, StreamRelay
from orchestrator.forwarding.upstream import (
    UpstreamConnectError,
    UpstreamDisconnected,
    UpstreamMalformed,
    UpstreamPool,
    UpstreamResponse,
)
from orchestrator.routing.context import RequestContext
from orchestrator.routing.fleet_state import FleetState
from orchestrator.routing.plugin import Decision, RoutingView
from orchestrator.routing.profile import Profile
from orchestrator.table.snapshot import RoutingTable
from orchestrator.table.source import TableHolder

SSE_CONTENT_TYPE: Final = "text/event-stream"
PINNED_PROFILE: Final = "stored-response"  # the `profile` label of a request sent to its holder
CHAT_PATH: Final = "/v1/chat/completions"
_PASSED_HEADERS: Final = (
    ("content-type", "Content-Type"),
    ("content-encoding", "Content-Encoding"),
)
_UNBOUNDED: Final = contextlib.nullcontext()  # an attempt without a first-byte bound: no timer


class UpstreamReply:
    """The answer to relay: `status` and `headers` as the replica sent them, and either `body`
    (a whole answer) or `chunks` (SSE bytes as they arrive). Whoever gets a reply with chunks
    must `aclose()` it once done, and at once when the client goes away. `output_tokens` is
    the whole answer's count (a stream's is passed to `StreamRelay.on_end` when it ends).
    `settle`, on a whole answer asked for with `settle_later`: close its books, once, in the
    same event-loop step that got the reply (it returns the output tokens counted).

    A plain class, not a dataclass: compiled, a dataclass still runs the interpreted
    `__init__` the dataclasses module writes, and one of these is made per request."""

    __slots__ = ("body", "chunks", "headers", "output_tokens", "replica", "retries", "settle",
                 "status")  # fmt: skip

    def __init__(
        self,
        status: int,
        headers: Mapping[str, str],
        replica: Replica,
        body: bytes | None = None,
        chunks: StreamRelay | None = None,
        retries: int = 0,
        output_tokens: int = 0,
        settle: Callable[[], int] | None = None,
    ) -> None:
        self.status = status
        self.headers = headers
        self.replica = replica
        self.body = body
        self.chunks = chunks
        self.retries = retries
        self.output_tokens = output_tokens
        self.settle = settle

    async def aclose(self) -> None:
        if self.chunks is not None:
            await self.chunks.aclose()


class _Request:
    """One request as its attempts share it (a plain class: see `UpstreamReply`)."""

    __slots__ = ("body", "ctx", "deadline_s", "path", "slo_class", "target")

    def __init__(
        self,
        ctx: RequestContext,
        path: str,
        body: bytes,
        deadline_s: float,
        target: SloTarget,
        slo_class: str,
    ) -> None:
        self.ctx = ctx
        self.path = path
        self.body = body
        self.deadline_s = deadline_s
        self.target = target
        self.slo_class = slo_class


class Dispatcher:
    """Routes with `profile` over the live table and forwards over the shared upstream pool."""

    def __init__(
        self,
        *,
        table: TableHolder,
        fleet: FleetState,
        profile: Profile,
        breakers: CircuitBreakers,
        upstream: UpstreamPool,
        metrics: RouterMetrics,
        settings: DispatchSettings,
        clock: Clock | None = None,
    ) -> None:
        self._table = table
        self._fleet = fleet
        self.profile = profile
        self._breakers = breakers
        self._upstream = upstream
        self._metrics = metrics
        self.settings = settings
        self._clock = clock or MonotonicClock()
        self._ledger = Ledger(fleet, breakers, metrics, self._clock)
        self.streams: dict[str, set[StreamRelay]] = {}  # movable streams by replica id

    async def dispatch(
        self,
        ctx: RequestContext,
        path: str,
        body: bytes,
        *,
        deadline_s: float,
        settle_later: bool = False,
    ) -> UpstreamReply:
        """Forward `body` to `path` (e.g. "/v1/chat/completions") on the chosen replica.

        `deadline_s` is absolute, on the dispatcher clock (`time.monotonic()` by default).
        Raises `OrchestratorError`: NOT_FOUND (unknown model), UNAVAILABLE (no replica could take
        it), DEADLINE_EXCEEDED (the deadline passed before the first byte).
        """
        now = self._clock.now()
        if deadline_s <= now:
            raise _deadline_error()
        slo_class = ctx.target_class
        request = _Request(
            ctx, path, body, deadline_s, self.settings.slo.target(ctx.model, slo_class), slo_class
        )
        decision = self._decide(request, now)
        primary = decision.primary
        self._metrics.decided(decision.profile, primary)
        stats = self._fleet.stats(primary.replica_id)
        if stats is not None and stats.load is not None:
            self._metrics.decision_load_age.observe(max(0.0, now - stats.load.observed_at_s))
        failures: list[str] = []
        for index, replica in enumerate((primary, *decision.fallbacks)):
            if index:
                self._metrics.retries.inc()
            if not self._breakers.allow(replica.replica_id):
                self._ledger.upstream_error(replica, UpstreamErrorKind.CIRCUIT_OPEN)
                failures.append(UpstreamErrorKind.CIRCUIT_OPEN.value)
                continue
            try:
                opened = await self._attempt(replica, request, body, settle_later=settle_later)
            except AttemptFailed as failure:
                self._ledger.upstream_error(replica, failure.kind)
                failures.append(failure.kind.value)
                continue
            reply = opened if isinstance(opened, UpstreamReply) else self._relayed(request, opened)
            reply.retries = index
            return reply
        if UpstreamErrorKind.MALFORMED.value in failures:
            raise OrchestratorError(
                ErrorCode.BAD_GATEWAY,
                f"no replica of `{ctx.model}` gave a well-framed answer; "
                f"{len(failures)} tried ({', '.join(failures)})",
            )
        raise OrchestratorError(
            ErrorCode.UNAVAILABLE,
            f"no replica of `{ctx.model}` could take the request; "
            f"{len(failures)} tried ({', '.join(failures)})",
        )

    def table_changed(self, table: RoutingTable) -> None:
        """Move the streams of replicas that drain or left `table` to others."""
        for replica_id, relays in list(self.streams.items()):
            replica = table.replica(replica_id)
            if replica is None or replica.state is ReplicaState.DRAINING:
                for relay in list(relays):
                    relay.move_off()

    def _decide(self, request: _Request, now: float) -> Decision:
        ctx = request.ctx
        table = self._table.snapshot()
        if ctx.replica_id is not None:
            return _pinned(ctx.replica_id, table.replica(ctx.replica_id))
        target = request.target
        view = RoutingView(table, target.ttft_s, target.tpot_s, now, self._fleet.reservation)
        return self.profile.decide(ctx, view, self._fleet.candidates(table))

    def _relayed(self, request: _Request, opened: Moved) -> UpstreamReply:
        framing = framing_for(request.path)
        mover = None
        if self.settings.migration_attempts and request.ctx.replica_id is None:
            mover = _Mover(self, request, opened.attempt.replica)
        relay = StreamRelay(
            self._ledger,
            opened.attempt,
            opened.response,
            opened.first,
            framing,
            mover=mover,
            stall_timeout_s=self.settings.stall_timeout_s,
        )
        status, headers = opened.response.status, _passed_headers(opened.response.headers)
        return UpstreamReply(status, headers, opened.attempt.replica, chunks=relay)

    async def _continue(
        self, request: _Request, path: str, body: bytes, tried: set[str]
    ) -> Moved | None:
        """Start a continuation (`body`, to `path`) on the best replica not in `tried`; None
        when the attempts ran out or no replica took it before the deadline."""
        now = self._clock.now()
        if now >= request.deadline_s:
            return None
        try:
            decision = self._decide(request, now)
        except OrchestratorError:  # no replica left to take it (the only one drained, say)
            return None
        for replica in (decision.primary, *decision.fallbacks):
            if replica.replica_id in tried or not self._breakers.allow(replica.replica_id):
                continue
            tried.add(replica.replica_id)
            try:
                opened = await self._attempt(replica, request, body, path)
            except AttemptFailed as failure:
                self._ledger.upstream_error(replica, failure.kind)
                return None
            except OrchestratorError:  # the deadline passed
                return None
            if isinstance(opened, UpstreamReply):  # refused (4xx): the next would refuse too
                return None
            return opened
        return None

    # -- one attempt ---------------------------------------------------------------------------

    async def _attempt(
        self,
        replica: Replica,
        request: _Request,
        body: bytes,
        path: str | None = None,
        *,
        settle_later: bool = False,
    ) -> UpstreamReply | Moved:
        """A whole answer, or a stream that started (its first bytes read); `path`: where a
        continuation goes when it is not the request's own; `settle_later`: see `dispatch`."""
        path = path or request.path
        start_s = self._clock.now()
        remaining_s = request.deadline_s - start_s
        if remaining_s <= 0:
            self._breakers.released(replica.replica_id)
            raise _deadline_error()
        attempt = self._ledger.open(replica, start_s, request.target, request.slo_class)
        framing = framing_for(path)
        first_byte_s = self.settings.first_byte_timeout_s if request.ctx.stream else None
        bounded = first_byte_s is not None and first_byte_s < remaining_s
        response: UpstreamResponse | None = None
        handed_over = False
        try:
            try:
                async with asyncio.timeout(first_byte_s) if bounded else _UNBOUNDED:
                    response = await self._upstream.post_json(
                        replica.url,
                        path,
                        body,
                        timeout_s=remaining_s,
                        connect_timeout_s=self.settings.connect_timeout_s,
                    )
                    if response.status >= 500:
                        raise AttemptFailed(UpstreamErrorKind.HTTP_5XX)
                    headers = _passed_headers(response.headers)
                    streamed = response.status < 300 and headers.get("Content-Type", "").startswith(
                        SSE_CONTENT_TYPE
                    )
                    if streamed:
                        first = await response.read_some()
                if not streamed:
                    data = await response.read()
                    count = framing.output_tokens
                    if settle_later:
                        handed_over = True
                        settle = partial(self._settle, attempt, response, count, data)
                        return UpstreamReply(
                            response.status, headers, replica, body=data, settle=settle
                        )
                    tokens = self._settle(attempt, response, count, data)
                    return UpstreamReply(
                        response.status, headers, replica, body=data, output_tokens=tokens
                    )
                if not first:
                    raise AttemptFailed(UpstreamErrorKind.DISCONNECT)
            # One name per clause: compiled, each `as` name has the type of its first clause.
            except UpstreamMalformed as malformed:
                raise AttemptFailed(UpstreamErrorKind.MALFORMED) from malformed
            except UpstreamDisconnected as disconnected:
                raise AttemptFailed(UpstreamErrorKind.DISCONNECT) from disconnected
            except UpstreamConnectError as unreachable:
                if self._clock.now() >= request.deadline_s:
                    raise _deadline_error() from None
                raise AttemptFailed(UpstreamErrorKind.CONNECT) from unreachable
            except TimeoutError:
                if bounded and self._clock.now() < request.deadline_s:
                    raise AttemptFailed(UpstreamErrorKind.FIRST_BYTE_TIMEOUT) from None
                raise _deadline_error() from None
            handed_over = True
            return Moved(attempt, response, first)
        except AttemptFailed:
            self._ledger.close(attempt, ok=False, output_tokens=0, replica_failed=True)
            raise
        finally:
            if not handed_over:
                if response is not None:
                    response.close()
                self._ledger.close(attempt, ok=False, output_tokens=0)

    def _settle(
        self,
        attempt: Attempt,
        response: UpstreamResponse,
        count: Callable[[bytes], int | None],
        data: bytes,
    ) -> int:
        """Close the books of an attempt whose whole answer was read: its connection back to
        the pool, the attempt counted out; returns its output tokens."""
        response.release()
        tokens = (count(data) or 0) if response.status < 300 else 0
        self._ledger.close(attempt, ok=True, output_tokens=tokens)
        return tokens


class _Mover:
    """The dispatcher's side of one stream's migrations: what to send, where it has been."""

    __slots__ = ("_dispatcher", "_left", "_request", "_tried", "path", "replica_id", "request")

    def __init__(self, dispatcher: Dispatcher, request: _Request, first: Replica) -> None:
        self._dispatcher = dispatcher
        self._request = request
        self._left = dispatcher.settings.migration_attempts
        self._tried = {first.replica_id}
        self.request = request.body
        self.path = request.path  # where its continuations go: a Responses stream's to chat
        if request.path.startswith(RESPONSES_PATH):
            self.path = CHAT_PATH
        self.replica_id: str | None = None

    def transcript(self) -> StreamTranscript:
        if self._request.path.startswith(RESPONSES_PATH):
            return ResponsesTranscript()
        return Transcript(chat=self.path.startswith(CHAT_PATH))

    def track(self, relay: StreamRelay, replica_id: str | None) -> None:
        streams = self._dispatcher.streams
        if self.replica_id is not None:
            relays = streams.get(self.replica_id)
            if relays is not None:
                relays.discard(relay)
                if not relays:
                    del streams[self.replica_id]
        self.replica_id = replica_id
        if replica_id is not None:
            streams.setdefault(replica_id, set()).add(relay)

    async def move(self, body: bytes, reason: MigrationReason) -> Moved | None:
        while self._left > 0:
            self._left -= 1
            moved = await self._dispatcher._continue(self._request, self.path, body, self._tried)
            if moved is not None:
                return moved
        return None


def _passed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers relayed to the client, from the replica's (lower-case names)."""
    passed = {}
    for key, name in _PASSED_HEADERS:
        value = headers.get(key)
        if value is not None:
            passed[name] = value
    return passed


def _pinned(replica_id: str, replica: Replica | None) -> Decision:
    """The decision for a request that only `replica_id` can answer (it holds its response)."""
    if replica is None:
        raise OrchestratorError(
            ErrorCode.NOT_FOUND,
            f"the replica that holds this response ({replica_id}) is no longer serving; "
            "stored responses live on one replica and are lost with it",
        )
    return Decision(replica, (), PINNED_PROFILE)


def _deadline_error() -> OrchestratorError:
    return OrchestratorError(
        ErrorCode.DEADLINE_EXCEEDED, "the request did not finish before its deadline"
    )
