"""Live, per-replica facts the router keeps between table updates: in flight, latency, capacity.

One `ReplicaStats` per replica id, owned by the router process. The forwarder counts requests in
and out and records their latencies; the scraper stores the engine's last `ReplicaLoad`; the
capacity estimator writes `capacity_tokens_per_s`. Plugins only read.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.core.records import ReplicaLoad


@dataclass(slots=True)
class ReplicaStats:
    """Mutable, router-local view of one replica. Times in seconds, rates in output tokens/s."""

    capacity_tokens_per_s: float
    in_flight: int = 0
    started_total: int = 0
    finished_total: int = 0
    failed_total: int = 0
    output_tokens_total: int = 0
    ttft_s: float | None = None  # exponentially weighted, from completed requests
    tpot_s: float | None = None
    load: ReplicaLoad | None = None  # last scrape of the engine's /metrics
    circuit_open: bool = False

    def concurrency_capacity(self, target_tpot_s: float) -> float:
        """Sequences it can decode at once within the TPOT target (Little: rate x time/token)."""
        return max(1.0, self.capacity_tokens_per_s * target_tpot_s)

    def others_in_flight(self) -> int:
        """Requests the engine runs or queues that this router did not send (other routers)."""
        if self.load is None:
            return 0
        return max(0, self.load.running + self.load.waiting - self.in_flight)
