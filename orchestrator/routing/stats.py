"""Live, per-replica facts the router keeps between table updates: in flight, latency, capacity.

One `ReplicaStats` per replica id, owned by the router process. The forwarder counts requests in
and out and records their latencies; the engine's last `ReplicaLoad` arrives from the control
plane's routing table (or this router's own scraper, in file-fed mode) through
`FleetState.reported`, with the capacity estimate. Plugins only read.
"""

from __future__ import annotations

import math
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
    load: ReplicaLoad | None = None  # the engine's last readable load; None while unknown
    # Requests the engine held, by that load, that this router had not sent: other routers'.
    # Fixed at the report, so what this router sends after it adds on top (see `outstanding`).
    others: int = 0
    # Until when (router clock) the load counts as known: inf before any report (no data is not
    # bad data), -inf while the engine's page is an adapter error (`load_problem` says which).
    load_known_until_s: float = math.inf
    load_problem: str = ""
    circuit_open: bool = False

    def concurrency_capacity(self, target_tpot_s: float) -> float:
        """Sequences it can decode at once within the TPOT target (Little: rate x time/token)."""
        return max(1.0, self.capacity_tokens_per_s * target_tpot_s)

    def others_in_flight(self) -> int:
        """Requests the engine runs or queues that this router did not send (other routers), as
        of the last report; a stale report keeps its figure rather than reading as idle."""
        return self.others

    def load_known(self, now_s: float) -> bool:
        """Whether the last load may be believed at `now_s` (not stale, not an adapter error)."""
        return now_s <= self.load_known_until_s
