"""Live, per-replica facts the router keeps between table updates: in flight, latency, capacity.

One `ReplicaStats` per replica id, owned by the router process. The forwarder counts requests in
and out and records their latencies; the scraper stores the engine's last `ReplicaLoad`; the
capacity estimator writes `capacity_tokens_per_s` and `step_fixed_s`. Plugins only read.

Capacity against a request's own TPOT target: a decode step takes a fixed time `a` (reading the
weights) plus a share per running sequence, so the batch whose step stays within HEADROOM × T
grows with T − a/HEADROOM, not with T. From the capacity C0 stated at the reference target T0,

    sequences(T) = C0 · T0 · (HEADROOM·T − a) / (HEADROOM·T0 − a),

which is C0 · T0 (Little's law) at T = T0, and falls to 1 as T approaches the weight read: a
replica whose weight read eats most of a tight target takes only a small batch within it, and a
large one within a loose target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

from orchestrator.core.records import ReplicaLoad
from orchestrator.core.slo import MLPERF_TPOT_S

HEADROOM: Final = 0.85  # aim the mean step below the target: p99 TPOT sits above the mean
FIXED_SHARE_PRIOR: Final = 0.1  # prior share of the step target spent on the fixed (weight) read


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
    reference_tpot_s: float = MLPERF_TPOT_S  # the TPOT target `capacity_tokens_per_s` is at
    step_fixed_s: float | None = None  # fitted weight-read time of a step; None: the prior's
    # requests in flight per TPOT target (wall s): the tightest one binds the whole batch
    in_flight_by_tpot: dict[float, int] = field(default_factory=dict)
    tightest_tpot_s: float = math.inf

    def concurrency_capacity(self, target_tpot_s: float) -> float:
        """Sequences it can decode at once within the TPOT target (see the module docstring)."""
        reference = self.reference_tpot_s
        at_reference = self.capacity_tokens_per_s * reference
        if target_tpot_s == reference:
            return at_reference if at_reference > 1.0 else 1.0
        fixed = self.step_fixed_s
        if fixed is None:
            fixed = FIXED_SHARE_PRIOR * HEADROOM * reference
        span = HEADROOM * reference - fixed
        sequences = at_reference * (HEADROOM * target_tpot_s - fixed) / span if span > 0 else 0.0
        return sequences if sequences > 1.0 else 1.0

    def binding_tpot_s(self, target_tpot_s: float) -> float:
        """The TPOT target the replica's batch must meet if it takes a request with this one."""
        tightest = self.tightest_tpot_s
        return tightest if tightest < target_tpot_s else target_tpot_s

    def count_in(self, tpot_s: float) -> None:
        """One more request in flight with this TPOT target."""
        self.in_flight_by_tpot[tpot_s] = self.in_flight_by_tpot.get(tpot_s, 0) + 1
        if tpot_s < self.tightest_tpot_s:
            self.tightest_tpot_s = tpot_s

    def count_out(self, tpot_s: float) -> None:
        left = self.in_flight_by_tpot.get(tpot_s, 0) - 1
        if left > 0:
            self.in_flight_by_tpot[tpot_s] = left
            return
        self.in_flight_by_tpot.pop(tpot_s, None)
        if tpot_s <= self.tightest_tpot_s:
            self.tightest_tpot_s = min(self.in_flight_by_tpot, default=math.inf)

    def others_in_flight(self) -> int:
        """Requests the engine runs or queues that this router did not send (other routers)."""
        if self.load is None:
            return 0
        return max(0, self.load.running + self.load.waiting - self.in_flight)
