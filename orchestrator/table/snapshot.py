"""A versioned, read-only view of the fleet: what one router knows at one moment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from orchestrator.core.records import LoadReport, Replica, Site


@dataclass(frozen=True, slots=True)
class RoutingTable:
    """Replicas and sites at `version`. Newer versions replace older ones whole.

    `loads` holds each replica's last load report when the table comes from the control plane
    (empty from a replicas file, whose router scrapes for itself). Load changes far more often
    than the rest: it does not bump `version`; it has its own `load_version`, and reaches routers
    between snapshots as deltas (`LoadDelta`).
    """

    version: int
    replicas: tuple[Replica, ...]
    sites: Mapping[str, Site] = field(default_factory=lambda: MappingProxyType({}))
    loads: Mapping[str, LoadReport] = field(default_factory=lambda: MappingProxyType({}))
    load_version: int = 0

    @property
    def models(self) -> frozenset[str]:
        return frozenset(r.model for r in self.replicas)

    def replica(self, replica_id: str) -> Replica | None:
        for candidate in self.replicas:
            if candidate.replica_id == replica_id:
                return candidate
        return None

    def rtt_s(self, from_site: str, to_site: str) -> float:
        site = self.sites.get(from_site)
        return site.rtt_to(to_site) if site else 0.0


@dataclass(frozen=True, slots=True)
class LoadDelta:
    """The load reports that changed since `load_version`'s predecessor, for the table at
    `version` (its replicas and sites are unchanged)."""

    version: int
    load_version: int
    loads: tuple[LoadReport, ...]


EMPTY_TABLE = RoutingTable(version=0, replicas=())
