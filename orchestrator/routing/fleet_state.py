"""The router's live state of the fleet: one `ReplicaStats` per replica, kept across table updates,
and the bookkeeping the forwarder does around each request."""

from __future__ import annotations

from orchestrator.core.records import Replica, ReplicaLoad
from orchestrator.core.slo import MLPERF_TPOT_S
from orchestrator.routing.plugin import Candidate
from orchestrator.routing.stats import ReplicaStats
from orchestrator.table.snapshot import RoutingTable

LATENCY_SMOOTHING = 0.2  # weight of the newest observation in the latency averages


class FleetState:
    """Stats by replica id. New replicas start from their prior; vanished ones are dropped."""

    def __init__(self, reference_tpot_s: float = MLPERF_TPOT_S) -> None:
        """`reference_tpot_s` (wall seconds): the TPOT target the table's capacity priors are at."""
        self.reference_tpot_s = reference_tpot_s
        self._stats: dict[str, ReplicaStats] = {}
        self._candidates: tuple[RoutingTable, list[Candidate]] | None = None

    def sync(self, table: RoutingTable) -> None:
        """Match the stats to `table`'s replicas (called whenever the table changes)."""
        live = {r.replica_id for r in table.replicas}
        for replica_id in list(self._stats):
            if replica_id not in live:
                del self._stats[replica_id]
        for replica in table.replicas:
            if replica.replica_id not in self._stats:
                self._stats[replica.replica_id] = self._new(replica)
        self._candidates = None

    def _new(self, replica: Replica) -> ReplicaStats:
        return ReplicaStats(
            replica.capacity_prior_tokens_per_s, reference_tpot_s=self.reference_tpot_s
        )

    def stats(self, replica_id: str) -> ReplicaStats | None:
        return self._stats.get(replica_id)

    def candidates(self, table: RoutingTable) -> list[Candidate]:
        """Candidates for `table`, the same list object while the table stays the same.

        Profiles cache their filter results by the list's identity, and the stats inside are
        updated in place, so handing out one list per table keeps every request cheap.
        """
        cached = self._candidates
        if cached is not None and cached[0] is table:
            return cached[1]
        out = []
        for replica in table.replicas:
            stats = self._stats.get(replica.replica_id)
            if stats is None:
                stats = self._stats[replica.replica_id] = self._new(replica)
            out.append(Candidate(replica, stats))
        self._candidates = (table, out)
        return out

    # -- the forwarder's bookkeeping -----------------------------------------------------------

    def started(self, replica: Replica, target_tpot_s: float = MLPERF_TPOT_S) -> None:
        """A request with this TPOT target (wall s) went to `replica`."""
        stats = self._stats.get(replica.replica_id)
        if stats is not None:
            stats.in_flight += 1
            stats.started_total += 1
            stats.count_in(target_tpot_s)

    def first_token(self, replica: Replica, ttft_s: float) -> None:
        stats = self._stats.get(replica.replica_id)
        if stats is not None:
            stats.ttft_s = _smooth(stats.ttft_s, ttft_s)

    def finished(
        self,
        replica: Replica,
        *,
        ok: bool,
        output_tokens: int,
        tpot_s: float | None,
        target_tpot_s: float = MLPERF_TPOT_S,
    ) -> None:
        stats = self._stats.get(replica.replica_id)
        if stats is None:
            return
        stats.in_flight = max(0, stats.in_flight - 1)
        stats.count_out(target_tpot_s)
        stats.finished_total += 1
        stats.output_tokens_total += output_tokens
        if not ok:
            stats.failed_total += 1
        if tpot_s is not None:
            stats.tpot_s = _smooth(stats.tpot_s, tpot_s)

    def scraped(self, replica_id: str, load: ReplicaLoad) -> None:
        stats = self._stats.get(replica_id)
        if stats is not None:
            stats.load = load


def _smooth(previous: float | None, value: float) -> float:
    return value if previous is None else previous + LATENCY_SMOOTHING * (value - previous)
