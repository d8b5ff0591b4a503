"""Admission's Prometheus metrics: decisions by priority and outcome, queue depth and wait,
estimated capacity, per-key outcomes (by key id, never the key) and streams cut."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from orchestrator.forwarding.loop_metrics import CounterFamily

WAIT_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class AdmissionMetrics:
    """All admission families on one registry (the router's)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = CounterFamily(  # moved once per request: no lock
            "orchestrator_router_admission_total",
            "Admission outcomes by priority: admitted (at once), queued (admitted after waiting),"
            " or refused_* (429) with the reason.",
            ["priority", "outcome"],
            registry=registry,
        )
        self.queue_depth = Gauge(
            "orchestrator_router_admission_queue_depth",
            "Requests waiting for admission, by priority.",
            ["priority"],
            registry=registry,
        )
        self.wait = Histogram(
            "orchestrator_router_admission_wait_seconds",
            "Seconds admitted requests waited in the admission queue.",
            ["priority"],
            buckets=WAIT_BUCKETS_S,
            registry=registry,
        )
        self.active = Gauge(
            "orchestrator_router_admission_active_streams",
            "Admitted requests in progress (until their last byte).",
            registry=registry,
        )
        self.capacity = Gauge(
            "orchestrator_router_admission_capacity_streams",
            "Concurrent requests the routable fleet sustains within the latency targets, as"
            " admission last computed it.",
            registry=registry,
        )
        self.key_requests = Counter(
            "orchestrator_router_key_requests_total",
            "Requests per API key id: admitted, or refused by the key's limit (requests,"
            " output_tokens, streams).",
            ["key_id", "outcome"],
            registry=registry,
        )
        self.key_output_tokens = Counter(
            "orchestrator_router_key_output_tokens_total",
            "Output tokens served per API key id.",
            ["key_id"],
            registry=registry,
        )
        self.key_streams = Gauge(
            "orchestrator_router_key_streams",
            "Requests in progress per API key id.",
            ["key_id"],
            registry=registry,
        )
        self.streams_cut = Counter(
            "orchestrator_router_streams_cut_total",
            "Streams the router cut because the client read too slowly (its unread bytes passed"
            " the per-stream buffer cap); their upstream requests were cancelled.",
            ["frontend"],
            registry=registry,
        )

    def forget_key(self, key_id: str) -> None:
        """Drop the series of a key that left the keys file."""
        for family, labels in (
            (self.key_output_tokens, (key_id,)),
            (self.key_streams, (key_id,)),
        ):
            try:
                family.remove(*labels)
            except KeyError:
                continue
        for outcome in ("admitted", "requests", "output_tokens", "streams"):
            try:
                self.key_requests.remove(key_id, outcome)
            except KeyError:
                continue
