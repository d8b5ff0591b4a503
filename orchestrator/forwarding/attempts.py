"""The books of one try on one replica: FleetState, the circuit breaker and the per-replica
metrics see exactly one `started` and one `finished` per attempt, whatever ends it.
"""

from __future__ import annotations

from enum import StrEnum

from orchestrator.core.clock import Clock
from orchestrator.core.records import Replica
from orchestrator.core.slo import SloOutcome, SloTarget
from orchestrator.forwarding.breaker import CircuitBreakers
from orchestrator.forwarding.metrics import ReplicaSeries, RouterMetrics
from orchestrator.routing.fleet_state import FleetState


class UpstreamErrorKind(StrEnum):
    """Why a replica failed us: the `kind` label of the upstream error counter."""

    CONNECT = "connect"  # refused, reset or timed out before an answer began
    HTTP_5XX = "http_5xx"
    DISCONNECT = "disconnect"  # the answer began, then the connection broke
    MALFORMED = "malformed"  # the answer broke HTTP/1.1 framing; its connection was dropped
    FIRST_BYTE_TIMEOUT = "first_byte_timeout"  # no first byte within the attempt's bound
    STALL = "stall"  # a stream went quiet longer than the longest gap allowed between chunks
    CIRCUIT_OPEN = "circuit_open"  # skipped: routed to before routing saw its circuit open
    HEALTH = "health"
    SCRAPE = "scrape"


class Attempt:
    """One try on one replica, finished exactly once (FleetState, breaker and metrics agree)."""

    __slots__ = (
        "done", "first_token_s", "replica", "running_at_first_token", "series", "slo_class",
        "started_s", "target",
    )  # fmt: skip

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
        self.running_at_first_token: float | None = None  # requests on its replica then
        self.done = False


class Ledger:
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

    def open(self, replica: Replica, start_s: float, target: SloTarget, slo_class: str) -> Attempt:
        series = self._metrics.series(replica)
        self._fleet.started(replica, target.tpot_s)
        series.in_flight.inc()
        return Attempt(replica, series, start_s, target, slo_class)

    def first_token(self, attempt: Attempt) -> None:
        attempt.first_token_s = self._clock.now()
        ttft_s = attempt.first_token_s - attempt.started_s
        attempt.running_at_first_token = self._fleet.first_token(attempt.replica, ttft_s)
        attempt.series.ttft.observe(ttft_s)

    def close(
        self,
        attempt: Attempt,
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
            running_at_first_token=attempt.running_at_first_token,
            started_s=attempt.started_s,
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

    def migrated(self, reason: str, outcome: str, seconds: float | None = None) -> None:
        """Count one migration; `seconds` (failure to the continuation's first bytes) when it
        continued."""
        self._metrics.migrations.labels(reason, outcome).inc()
        if seconds is not None:
            self._metrics.migration_seconds.labels(reason).observe(seconds)

    def now(self) -> float:
        return self._clock.now()


class AttemptFailed(Exception):
    """This replica cannot take the request; try the next one."""

    def __init__(self, kind: UpstreamErrorKind) -> None:
        super().__init__(kind.value)
        self.kind = kind
