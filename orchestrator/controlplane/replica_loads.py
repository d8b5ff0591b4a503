"""The load half of the routing table: each replica's last scraped load, its capacity estimate and
adapter errors, numbered so that watchers get only what changed.

Replica actors (and the external checker) scrape each engine once per heartbeat and send the
parsed load; this keeps the newest per replica and runs the capacity estimator on it, once for the
whole fleet, so every router is handed the same capacity. Every recorded heartbeat takes the next
`load_version`; `since(v)` lists the replicas whose report is newer than `v`. Pure: no Ray, the
clock is passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.core.records import LoadReport, ReplicaLoad
from orchestrator.routing.estimator import CapacityEstimator
from orchestrator.routing.stats import ReplicaStats

_MAX_PROBLEM_CHARS = 300


@dataclass(slots=True)
class _Entry:
    load: ReplicaLoad | None
    read_s: float  # when the engine's page was read, on this clock
    load_version: int
    stats: ReplicaStats
    adapter_errors_total: int = 0
    problem: str = ""


class ReplicaLoads:
    """Last load per replica id, with the estimator's capacity; see the module docstring."""

    def __init__(self, estimator: CapacityEstimator, *, now_s: Callable[[], float]) -> None:
        self._estimator = estimator
        self._now_s = now_s
        self._entries: dict[str, _Entry] = {}
        self._version = 0

    @property
    def version(self) -> int:
        return self._version

    def record(
        self,
        replica_id: str,
        load: ReplicaLoad | None,
        *,
        prior_tokens_per_s: float,
        problem: str = "",
        age_s: float = 0.0,
    ) -> None:
        """One heartbeat: `load`, or `None` with the adapter's `problem` (counted), read `age_s`
        before it was sent: its reports' age counts from the scrape."""
        read_s = self._now_s() - max(0.0, age_s)
        self._version += 1
        entry = self._entries.get(replica_id)
        if entry is None:
            entry = _Entry(None, read_s, self._version, ReplicaStats(prior_tokens_per_s))
            self._entries[replica_id] = entry
        entry.read_s = read_s
        entry.load_version = self._version
        if load is None:
            entry.load = None
            entry.adapter_errors_total += 1
            entry.problem = problem[:_MAX_PROBLEM_CHARS]
            return
        entry.load, entry.problem = load, ""
        # The engine's own timestamps: scrape intervals measured on the clock that stamped them.
        self._estimator.update(replica_id, entry.stats, load, load.observed_at_s)

    def forget(self, replica_id: str) -> None:
        self._entries.pop(replica_id, None)
        self._estimator.forget(replica_id)

    def report(self, replica_id: str) -> LoadReport | None:
        entry = self._entries.get(replica_id)
        return None if entry is None else self._report(replica_id, entry, self._now_s())

    def all(self) -> dict[str, LoadReport]:
        now = self._now_s()
        return {rid: self._report(rid, entry, now) for rid, entry in self._entries.items()}

    def since(self, load_version: int) -> tuple[LoadReport, ...]:
        """Reports recorded after `load_version`, in replica id order."""
        now = self._now_s()
        return tuple(
            self._report(rid, entry, now)
            for rid, entry in sorted(self._entries.items())
            if entry.load_version > load_version
        )

    @staticmethod
    def _report(replica_id: str, entry: _Entry, now_s: float) -> LoadReport:
        return LoadReport(
            replica_id=replica_id,
            load=entry.load,
            age_s=max(0.0, now_s - entry.read_s),
            capacity_tokens_per_s=entry.stats.capacity_tokens_per_s,
            adapter_errors_total=entry.adapter_errors_total,
            problem=entry.problem,
        )
