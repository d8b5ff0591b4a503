"""Online capacity estimation: what each replica sustains within the latency targets.

Placeholder contract: `CapacityEstimator.update(replica_id, stats, load, now_s)` is called once
per scrape of a replica's `/metrics` and may change `stats.capacity_tokens_per_s`.
"""

from __future__ import annotations

from orchestrator.core.records import ReplicaLoad
from orchestrator.routing.stats import ReplicaStats


class CapacityEstimator:
    """Per-replica capacity, starting from the prior and corrected by what the router sees."""

    def __init__(self, *, target_ttft_s: float, target_tpot_s: float) -> None:
        self.target_ttft_s = target_ttft_s
        self.target_tpot_s = target_tpot_s

    def update(self, replica_id: str, stats: ReplicaStats, load: ReplicaLoad, now_s: float) -> None:
        """Fold one scrape into the replica's capacity estimate."""
        return None

    def forget(self, replica_id: str) -> None:
        """Drop history of a replica that left the table."""
        return None
