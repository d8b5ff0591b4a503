"""Carry out a routing decision: send the request body unchanged to the primary replica, move on to
the fallbacks while nothing has reached the client yet, and relay the answer.

Contract of `Dispatcher.dispatch`:

- Before the first byte of a successful answer (for a stream: its first SSE bytes, which the
  replica sends with its first token), a connect error, a 5xx, a dropped connection, a
  malformed answer or an open circuit moves the request to the next fallback (each move counts
  as a retry). When every candidate failed, it raises BAD_GATEWAY (502) if one answered
  malformed, else UNAVAILABLE.
- A 4xx from the replica is the client's answer: returned as it is, never retried.
- Once a stream has started, an upstream failure ends it with a terminal event in the stream's
  framing (`event_stream.py`): `data: {"error": {...}}` then `data: [DONE]` for completions, an
  `event: error` for the Responses API.
- A request whose context names a replica (`RequestContext.replica_id`: the holder of a stored
  response) goes there and nowhere else; NOT_FOUND when it left the table.
- The absolute `deadline_s` bounds everything, connect and read timeouts included: before the
  first byte its expiry raises DEADLINE_EXCEEDED, mid-stream it ends the stream with an error event.
- Cancelling the caller (a client that went away) or closing `UpstreamReply.chunks` closes the
  upstream connection at once, so the replica aborts the request.
- FleetState sees exactly one `started` and one `finished` per attempt, whatever happens.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from orchestrator.core.clock import Clock, MonotonicClock
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.records import Replica
from orchestrator.core.slo import SloOutcome, SloTarget, SloTargets
from orchestrator.forwarding.breaker import CircuitBreakers
from orchestrator.forwarding.event_stream import (
    COMPLETIONS_FRAMING,
    DONE_EVENT,
    Framing,
    framing_for,
)
from orchestrator.forwarding.metrics import ReplicaSeries, RouterMetrics
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
from orchestrator.table.source import TableHolder

SSE_CONTENT_TYPE: Final = "text/event-stream"
PINNED_PROFILE: Final = "stored-response"  # the `profile` label of a request sent to its holder
_DRAIN_AFTER_DONE_S: Final = 1.0  # a replica ends its body this soon after [DONE], or is dropped
_PASSED_HEADERS: Final = (
    ("content-type", "Content-Type"),
    ("content-encoding", "Content-Encoding"),
)


class UpstreamErrorKind(StrEnum):
    """Why a replica failed us: the `kind` label of the upstream error counter."""

    CONNECT = "connect"  # refused, reset or timed out before an answer began
    HTTP_5XX = "http_5xx"
    DISCONNECT = "disconnect"  # the answer began, then the connection broke
    MALFORMED = "malformed"  # the answer broke HTTP/1.1 framing; its connection was dropped
    CIRCUIT_OPEN = "circuit_open"  # skipped: routed to before routing saw its circuit open
    HEALTH = "health"
    SCRAPE = "scrape"


@dataclass(frozen=True, slots=True)
class DispatchSettings:
    """Latency targets per model and class (wall seconds) and the per-attempt connect timeout."""

    slo: SloTargets
    connect_timeout_s: float = 2.0


@dataclass(slots=True)
class UpstreamReply:
    """The answer to relay: `status` and `headers` as the replica sent them, and either `body`
    (a whole answer) or `chunks` (SSE bytes as they arrive). Whoever gets a reply with chunks
    must `aclose()` it once done, and at once when the client goes away. `output_tokens` is
    the whole answer's count (a stream's is passed to `StreamRelay.on_end` when it ends)."""

    status: int
    headers: Mapping[str, str]
    replica: Replica
    body: bytes | None = None
    chunks: StreamRelay | None = None
    retries: int = 0
    output_tokens: int = 0

    async def aclose(self) -> None:
        if self.chunks is not None:
            await self.chunks.aclose()


class _Attempt:
    """One try on one replica, finished exactly once (FleetState, breaker and metrics agree)."""

    __slots__ = ("done", "first_token_s", "replica", "series", "slo_class", "started_s", "target")

    def __init__(
        self,
        replica: Replica,
        series: ReplicaSeries,
        started_s: float,
        target: SloTarget,
        slo_class: str,
    ) -> None:
        self.replica = replica
        self.series = series
        self.started_s = started_s
        self.target = target
        self.slo_class = slo_class
        self.first_token_s: float | None = None
        self.done = False


class _Ledger:
    """The books every attempt keeps: FleetState, the breaker, per-replica metrics.

    `open` counts an attempt in; `close` counts it out exactly once, whatever ended it.
    """

    __slots__ = ("_breakers", "_clock", "_fleet", "_metrics")

    def __init__(
        self, fleet: FleetState, breakers: CircuitBreakers, metrics: RouterMetrics, clock: Clock
    ) -> None:
        self._fleet = fleet
        self._breakers = breakers
        self._metrics = metrics
        self._clock = clock

    def open(self, replica: Replica, start_s: float, target: SloTarget, slo_class: str) -> _Attempt:
        series = self._metrics.series(replica)
        self._fleet.started(replica, target.tpot_s)
        series.in_flight.inc()
        return _Attempt(replica, series, start_s, target, slo_class)

    def first_token(self, attempt: _Attempt) -> None:
        attempt.first_token_s = self._clock.now()
        ttft_s = attempt.first_token_s - attempt.started_s
        self._fleet.first_token(attempt.replica, ttft_s)
        attempt.series.ttft.observe(ttft_s)

    def close(
        self,
        attempt: _Attempt,
        *,
        ok: bool,
        output_tokens: int | None,
        replica_failed: bool = False,
        stream: bool = False,
    ) -> None:
        """Count the attempt out, once; later calls do nothing.

        `ok` means the replica's whole answer reached us (a 4xx answer included); a failure,
        the deadline or a client that went away make it false, and only a replica failure counts
        against the breaker. Non-streamed answers give no TTFT or TPOT: the router cannot see
        when their tokens were made, so their SLO outcome rests on the end-to-end target alone.
        """
        if attempt.done:
            return
        attempt.done = True
        replica_id = attempt.replica.replica_id
        end_s = self._clock.now()
        tokens = output_tokens or 0
        tpot_s = None
        if stream and attempt.first_token_s is not None and tokens > 1:
            tpot_s = (end_s - attempt.first_token_s) / (tokens - 1)
        self._fleet.finished(
            attempt.replica,
            ok=ok,
            output_tokens=tokens,
            tpot_s=tpot_s,
            target_tpot_s=attempt.target.tpot_s,
        )
        attempt.series.in_flight.dec()
        if replica_failed:
            self._breakers.failed(replica_id)
            outcome = SloOutcome.FAILED
        elif ok:
            self._breakers.succeeded(replica_id)
            e2e_s = end_s - attempt.started_s
            attempt.series.e2e.observe(e2e_s)
            if tpot_s is not None:
                attempt.series.tpot.observe(tpot_s)
            ttft_s = None
            if stream and attempt.first_token_s is not None:
                ttft_s = attempt.first_token_s - attempt.started_s
            outcome = attempt.target.outcome(ttft_s=ttft_s, tpot_s=tpot_s, e2e_s=e2e_s)
        else:
            self._breakers.released(replica_id)
            outcome = SloOutcome.FAILED
        self._metrics.slo_outcome(attempt.replica, attempt.slo_class, outcome)

    def upstream_error(self, replica: Replica, kind: UpstreamErrorKind) -> None:
        self._metrics.upstream_errors.labels(replica.replica_id, kind.value).inc()


class _AttemptFailed(Exception):
    """This replica cannot take the request; try the next one."""

    def __init__(self, kind: UpstreamErrorKind) -> None:
        super().__init__(kind.value)
        self.kind = kind


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
        self._ledger = _Ledger(fleet, breakers, metrics, self._clock)

    async def dispatch(
        self, ctx: RequestContext, path: str, body: bytes, *, deadline_s: float
    ) -> UpstreamReply:
        """Forward `body` to `path` (e.g. "/v1/chat/completions") on the chosen replica.

        `deadline_s` is absolute, on the dispatcher clock (`time.monotonic()` by default).
        Raises `OrchestratorError`: NOT_FOUND (unknown model), UNAVAILABLE (no replica could take
        it), DEADLINE_EXCEEDED (the deadline passed before the first byte).
        """
        table = self._table.snapshot()
        now = self._clock.now()
        if deadline_s <= now:
            raise _deadline_error()
        slo_class = ctx.target_class
        target = self.settings.slo.target(ctx.model, slo_class)
        if ctx.replica_id is not None:
            decision = _pinned(ctx.replica_id, table.replica(ctx.replica_id))
        else:
            view = RoutingView(table, target.ttft_s, target.tpot_s, now)
            decision = self.profile.decide(ctx, view, self._fleet.candidates(table))
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
                reply = await self._attempt(replica, path, body, deadline_s, target, slo_class)
            except _AttemptFailed as failure:
                self._ledger.upstream_error(replica, failure.kind)
                failures.append(failure.kind.value)
                continue
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

    # -- one attempt ---------------------------------------------------------------------------

    async def _attempt(
        self,
        replica: Replica,
        path: str,
        body: bytes,
        deadline_s: float,
        target: SloTarget,
        slo_class: str,
    ) -> UpstreamReply:
        start_s = self._clock.now()
        remaining_s = deadline_s - start_s
        if remaining_s <= 0:
            self._breakers.released(replica.replica_id)
            raise _deadline_error()
        attempt = self._ledger.open(replica, start_s, target, slo_class)
        framing = framing_for(path)
        response: UpstreamResponse | None = None
        handed_over = False
        try:
            try:
                response = await self._upstream.post_json(
                    replica.url,
                    path,
                    body,
                    timeout_s=remaining_s,
                    connect_timeout_s=self.settings.connect_timeout_s,
                )
                if response.status >= 500:
                    raise _AttemptFailed(UpstreamErrorKind.HTTP_5XX)
                headers = _passed_headers(response.headers)
                streamed = response.status < 300 and headers.get("Content-Type", "").startswith(
                    SSE_CONTENT_TYPE
                )
                if not streamed:
                    data = await response.read()
                    response.release()
                    tokens = framing.output_tokens(data) if response.status < 300 else 0
                    self._ledger.close(attempt, ok=True, output_tokens=tokens)
                    return UpstreamReply(
                        response.status, headers, replica, body=data, output_tokens=tokens or 0
                    )
                first = await response.read_some()
                if not first:
                    raise _AttemptFailed(UpstreamErrorKind.DISCONNECT)
            except UpstreamMalformed as error:
                raise _AttemptFailed(UpstreamErrorKind.MALFORMED) from error
            except UpstreamDisconnected as error:
                raise _AttemptFailed(UpstreamErrorKind.DISCONNECT) from error
            except UpstreamConnectError as error:
                if self._clock.now() >= deadline_s:
                    raise _deadline_error() from None
                raise _AttemptFailed(UpstreamErrorKind.CONNECT) from error
            except TimeoutError:
                raise _deadline_error() from None
            relay = StreamRelay(self._ledger, attempt, response, first, framing)
            handed_over = True
            return UpstreamReply(response.status, headers, replica, chunks=relay)
        except _AttemptFailed:
            self._ledger.close(attempt, ok=False, output_tokens=0, replica_failed=True)
            raise
        finally:
            if not handed_over:
                if response is not None:
                    response.close()
                self._ledger.close(attempt, ok=False, output_tokens=0)


class StreamRelay:
    """An upstream SSE stream as an async iterator of byte chunks, relayed as they arrive.

    The stream ends with the replica's body or, sooner, once a chunk that ends the stream in its
    framing (`data: [DONE]`, or the Responses API's terminal event) has been yielded: the answer
    is whole then, and a client that hangs up as soon as it reads that (as the official client
    does) has had all of it. The replica's end of the body is then awaited in the background, to
    keep the connection.

    Tokens are counted as output events (no JSON parsing per chunk); the usage at the end, when
    there is one, gives the exact count. A failure after the first chunk yields one last chunk
    holding the terminal error event of the framing. `aclose()` closes the upstream connection
    (so the replica aborts) unless the stream already ended; calling it more than once is
    harmless.
    `on_end`, when set, is called once with the stream's output tokens when it ends, however.
    """

    __slots__ = ("_attempt", "_done", "_end_watch", "_events", "_first", "_framing", "_last",
                 "_ledger", "_previous", "_response", "_unsent", "head", "on_end")  # fmt: skip

    def __init__(
        self,
        ledger: _Ledger,
        attempt: _Attempt,
        response: UpstreamResponse,
        first: bytes,
        framing: Framing = COMPLETIONS_FRAMING,
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
        self.on_end: Callable[[int], None] | None = None

    def __aiter__(self) -> StreamRelay:
        return self

    @property
    def finished(self) -> bool:
        """Every byte of the stream has been yielded: the next step ends it without waiting."""
        response = self._response
        return self._first is None and (self._done or response is None or response.finished)

    async def __anext__(self) -> bytes:
        if self._first is not None:
            first, self._first = self._first, None
            return first
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
        except UpstreamMalformed:
            self._ledger.upstream_error(self._attempt.replica, UpstreamErrorKind.MALFORMED)
            self._end(ok=False, replica_failed=True)
            return self.error_event(
                OrchestratorError(ErrorCode.BAD_GATEWAY, "the replica's stream broke its framing")
            )
        except UpstreamDisconnected:
            self._ledger.upstream_error(self._attempt.replica, UpstreamErrorKind.DISCONNECT)
            self._end(ok=False, replica_failed=True)
            return self.error_event(
                OrchestratorError(ErrorCode.UNAVAILABLE, "the replica failed mid-stream")
            )
        except BaseException:
            self._end(ok=False)
            raise
        if not data:
            self._end(ok=True)
            raise StopAsyncIteration
        counted = self._framing.counted_events(data)
        if counted and not self._events:
            self._ledger.first_token(self._attempt)
        self._events += counted
        self._previous, self._last = self._last, data
        self._done = self._end_watch.ends(data)
        return data

    async def aclose(self) -> None:
        self._end(ok=False)

    def error_event(self, error: OrchestratorError) -> bytes:
        """The terminal event that ends this stream with `error`, numbered after what was sent."""
        sent = self._previous if self._unsent else self._previous + self._last
        return self._framing.error_event(error, sent)

    def unsent(self) -> None:
        """The chunk last yielded was not passed on: the terminal event follows the one before."""
        self._unsent = True

    def _end(self, *, ok: bool, replica_failed: bool = False) -> None:
        response, self._response = self._response, None
        if response is None:
            return
        if ok:
            response.release(drain_s=_DRAIN_AFTER_DONE_S)
        else:
            response.close()
        tail = self._previous + self._last
        tokens = self._framing.output_tokens(tail)
        if tokens is None:
            tokens = max(0, self._events - (1 if DONE_EVENT in tail else 0))
        self._ledger.close(
            self._attempt, ok=ok, output_tokens=tokens, replica_failed=replica_failed, stream=True
        )
        on_end, self.on_end = self.on_end, None
        if on_end is not None:
            on_end(tokens)


def _passed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers relayed to the client, from the replica's (lower-case names)."""
    return {name: headers[key] for key, name in _PASSED_HEADERS if key in headers}


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


def error_event(error: OrchestratorError) -> bytes:
    """The terminal SSE events for a completions stream that cannot go on: an OpenAI error, then
    [DONE]. (A relay's own `error_event` answers in its stream's framing.)"""
    return COMPLETIONS_FRAMING.error_event(error)
