"""The router's Prometheus metrics, defined once: requests, decisions, latencies, in flight,
retries, upstream errors, circuits, estimated capacity, latency targets and SLO outcomes.

Every family is registered on the `CollectorRegistry` passed in (nothing global), named
`orchestrator_router_*`, and labelled only from: site, pool, generation, replica, code, frontend,
profile, kind, model, priority (the request's class), outcome, and engine_version on the one info
family that joins capacity to the software a replica runs. Per-replica children are cached
so the hot path does one dict lookup per metric, and the families moved on every request are
`loop_metrics`' (plain numbers, read at a scrape) rather than prometheus_client's locked ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from orchestrator.core.records import Replica
from orchestrator.core.slo import SloOutcome, SloTargets
from orchestrator.forwarding.loop_metrics import (
    CounterCell,
    CounterFamily,
    HistogramCell,
    HistogramFamily,
)

LATENCY_BUCKETS_S = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0,
    640.0,
)  # fmt: skip
TOKEN_BUCKETS_S = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5,
    5.0,
)  # fmt: skip


class InFlight:
    """Requests open on one replica: a plain count that its gauge reads when scraped (moved
    twice per request, a gauge child would take its lock each time)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def inc(self) -> None:
        self.count += 1

    def dec(self) -> None:
        self.count -= 1

    def __call__(self) -> float:
        return float(self.count)


@dataclass(frozen=True, slots=True)
class ReplicaSeries:
    """The children of the per-replica families for one replica (looked up once, then reused)."""

    in_flight: InFlight
    ttft: HistogramCell
    tpot: HistogramCell
    e2e: HistogramCell


# Load reports arrive about once a second; older than a few seconds they count as stale.
LOAD_AGE_BUCKETS_S = (0.1, 0.25, 0.5, 0.75, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.75, 2.0, 3.0, 5.0, 10.0)


class RouterMetrics:
    """All router metrics on one registry; one instance per router process."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = CounterFamily(
            "orchestrator_router_requests_total",
            "Client requests answered, by frontend and response code (HTTP status or gRPC code).",
            ["frontend", "code"],
            registry=registry,
        )
        self.decisions = CounterFamily(
            "orchestrator_router_decisions_total",
            "Routing decisions, by the primary replica's site, pool, generation and the profile.",
            ["profile", "site", "pool", "generation"],
            registry=registry,
        )
        self.ttft = HistogramFamily(
            "orchestrator_router_time_to_first_token_seconds",
            "Seconds from sending a streamed request upstream to its first bytes of output.",
            ["pool", "generation"],
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.tpot = HistogramFamily(
            "orchestrator_router_time_per_output_token_seconds",
            "Mean seconds between output tokens of a streamed request after its first.",
            ["pool", "generation"],
            buckets=TOKEN_BUCKETS_S,
            registry=registry,
        )
        self.e2e = HistogramFamily(
            "orchestrator_router_request_duration_seconds",
            "Seconds from sending a request upstream to its last byte, for successful requests.",
            ["pool", "generation"],
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.decision_load_age = HistogramFamily(
            "orchestrator_router_decision_load_age_seconds",
            "Age of the primary replica's load report when a routing decision used it.",
            buckets=LOAD_AGE_BUCKETS_S,
            registry=registry,
        )
        self.in_flight = Gauge(
            "orchestrator_router_in_flight_requests",
            "Requests this router process has open on each replica.",
            ["replica"],
            registry=registry,
        )
        self.retries = CounterFamily(
            "orchestrator_router_retries_total",
            "Times a request moved on to a fallback replica before its first token.",
            registry=registry,
        )
        self.upstream_errors = Counter(
            "orchestrator_router_upstream_errors_total",
            "Failures talking to a replica by kind (connect, http_5xx, disconnect, malformed,"
            " first_byte_timeout, stall...).",
            ["replica", "kind"],
            registry=registry,
        )
        self.migrations = Counter(
            "orchestrator_router_migrations_total",
            "Streams continued on another replica after their first token, by reason"
            " (disconnect, stall, drain) and outcome (continued; failed: no replica took the"
            " continuation; impossible: the stream could not be continued).",
            ["reason", "outcome"],
            registry=registry,
        )
        self.migration_seconds = Histogram(
            "orchestrator_router_migration_seconds",
            "From a stream's failure to its continuation's first bytes, by reason.",
            ["reason"],
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=registry,
        )
        self.circuit_open = Gauge(
            "orchestrator_router_circuit_open",
            "1 while this router keeps requests away from a replica after failures, else 0.",
            ["replica"],
            registry=registry,
        )
        self.capacity = Gauge(
            "orchestrator_router_estimated_capacity_tokens_per_second",
            "Output tokens/s the router estimates a replica sustains within the latency targets.",
            ["site", "pool", "generation", "replica"],
            registry=registry,
        )
        self.replica_info = Gauge(
            "orchestrator_router_replica_info",
            "1 for each replica in this router's routing table, labelled with the version its"
            " engine states (empty when it states none): join it on replica to read capacity per"
            " software version.",
            ["site", "pool", "generation", "replica", "engine_version"],
            registry=registry,
        )
        self.routable = Gauge(
            "orchestrator_router_routable_replicas",
            "Replicas of each model this router would route to now: ready, circuit closed.",
            ["model"],
            registry=registry,
        )
        self.slo_target = Gauge(
            "orchestrator_router_slo_target_seconds",
            "The p99 latency target the router routes against (wall seconds), by model (* for"
            " every model without its own), request class (priority) and kind (ttft, tpot, e2e).",
            ["model", "priority", "kind"],
            registry=registry,
        )
        self.slo_requests = CounterFamily(
            "orchestrator_router_slo_requests_total",
            "Requests answered, by class (priority), site, pool, generation and SLO outcome: met,"
            " missed_ttft, missed_tpot, missed_e2e, failed (counted once, on the replica that"
            " answered).",
            ["priority", "site", "pool", "generation", "outcome"],
            registry=registry,
        )
        self._series: dict[str, ReplicaSeries] = {}
        self._outcomes: dict[tuple[str, str, str, str, SloOutcome], CounterCell] = {}
        self._replicas: dict[str, Replica] = {}  # every replica with series here, by id
        self._routable_models: set[str] = set()
        self._decisions: dict[tuple[str, str], CounterCell] = {}

    def series(self, replica: Replica) -> ReplicaSeries:
        """The per-replica children for `replica`, created on first use."""
        found = self._series.get(replica.replica_id)
        if found is None:
            self._replicas[replica.replica_id] = replica
            pool, generation = replica.pool, replica.generation.value
            in_flight = InFlight()
            self.in_flight.labels(replica.replica_id).set_function(in_flight)
            found = self._series[replica.replica_id] = ReplicaSeries(
                in_flight=in_flight,
                ttft=self.ttft.labels(pool, generation),
                tpot=self.tpot.labels(pool, generation),
                e2e=self.e2e.labels(pool, generation),
            )
        return found

    def decided(self, profile: str, primary: Replica) -> None:
        """Count a routing decision whose primary is `primary`."""
        key = (profile, primary.replica_id)
        counter = self._decisions.get(key)
        if counter is None:
            self._replicas[primary.replica_id] = primary
            labels = (profile, primary.site, primary.pool, primary.generation.value)
            counter = self._decisions[key] = self.decisions.labels(*labels)
        counter.inc()

    def slo_outcome(self, replica: Replica, slo_class: str, outcome: SloOutcome) -> None:
        """Count one request's outcome against its class's target."""
        key = (slo_class, replica.site, replica.pool, replica.generation.value, outcome)
        counter = self._outcomes.get(key)
        if counter is None:
            counter = self._outcomes[key] = self.slo_requests.labels(
                slo_class, replica.site, replica.pool, replica.generation.value, outcome.value
            )
        counter.inc()

    def show_targets(self, targets: SloTargets, models: tuple[str, ...] = ()) -> None:
        """Export `targets` (wall seconds) as `orchestrator_router_slo_target_seconds`."""
        self.slo_target.clear()
        for model, slo_class, target in targets.rows(models):
            self.slo_target.labels(model, slo_class, "ttft").set(target.ttft_s)
            self.slo_target.labels(model, slo_class, "tpot").set(target.tpot_s)
            if target.e2e_s is not None:
                self.slo_target.labels(model, slo_class, "e2e").set(target.e2e_s)

    def count_routable(self, per_model: Mapping[str, int]) -> None:
        """Set the routable replicas of each model; a model seen before and now absent reads 0,
        so "no replica left" is a series at 0 rather than no series at all."""
        self._routable_models.update(per_model)
        for model in self._routable_models:
            self.routable.labels(model).set(per_model.get(model, 0))

    def show_replicas(self, replicas: Iterable[Replica]) -> None:
        """One `orchestrator_router_replica_info` per replica of the table, and only those."""
        self.replica_info.clear()
        for replica in replicas:
            self.replica_info.labels(
                replica.site,
                replica.pool,
                replica.generation.value,
                replica.replica_id,
                replica.engine_version,
            ).set(1)

    def forget_except(self, live_ids: Set[str]) -> None:
        """Drop the per-replica series of every replica not in `live_ids` (the table's)."""
        for replica_id in [r for r in self._replicas if r not in live_ids]:
            self.forget(self._replicas[replica_id])

    def forget(self, replica: Replica) -> None:
        """Drop the per-replica series of a replica that left the table."""
        self._series.pop(replica.replica_id, None)
        self._replicas.pop(replica.replica_id, None)
        for key in [key for key in self._decisions if key[1] == replica.replica_id]:
            del self._decisions[key]
        for family, labels in (
            (self.in_flight, (replica.replica_id,)),
            (self.circuit_open, (replica.replica_id,)),
            (
                self.capacity,
                (replica.site, replica.pool, replica.generation.value, replica.replica_id),
            ),
        ):
            try:
                family.remove(*labels)
            except KeyError:
                continue
