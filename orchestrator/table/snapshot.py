"""A versioned, read-only view of the fleet: what one router knows at one moment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from orchestrator.core.records import Replica, Site


@dataclass(frozen=True, slots=True)
class RoutingTable:
    """Replicas and sites at `version`. Newer versions replace older ones whole."""

    version: int
    replicas: tuple[Replica, ...]
    sites: Mapping[str, Site] = field(default_factory=lambda: MappingProxyType({}))

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


EMPTY_TABLE = RoutingTable(version=0, replicas=())
