"""What the registry holds about replicas and hands to operators: plain, frozen records."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.config.schema import PoolSpec
from orchestrator.controlplane.capacity_history import PoolCapacity
from orchestrator.controlplane.reconcile import ObservedState
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, LoadReport, Replica, ReplicaLoad


@dataclass(frozen=True, slots=True)
class ReplicaRegistration:
    """What a replica tells the registry about itself once its engine answers `/health`.

    `node` is the Ray node id (empty for external replicas); `time_scale` is the simulated engine's
    slow-down (1.0 for real engines), by which its capacity prior is divided. `external` marks a
    replica that runs outside the control plane's actors (an external pool's endpoint, or one
    registered over gRPC): the control plane health-checks it but never places, drains or stops it.
    `engine_version` is the version the engine reports (empty when it reports none).
    """

    replica_id: str
    url: str
    pool: str
    site: str
    generation: Generation
    engine: EngineKind
    node: str = ""
    time_scale: float = 1.0
    external: bool = False
    engine_version: str = ""


@dataclass(frozen=True, slots=True)
class ReplicaRecord:
    """One registered replica as the registry last saw it; `load` is `None` before a heartbeat."""

    registration: ReplicaRegistration
    state: ObservedState
    since_s: float
    last_heartbeat_s: float
    load: ReplicaLoad | None = None

    @property
    def replica_id(self) -> str:
        return self.registration.replica_id


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    """`known` is False when the registry has no such replica (it restarted): re-register."""

    known: bool
    state: ObservedState | None = None


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """One registered replica for an operator: its record, its row in the table (`None` once
    gone), how long ago its last heartbeat arrived, and its load report (`None` before any)."""

    record: ReplicaRecord
    listed: Replica | None
    heartbeat_age_s: float
    load: LoadReport | None = None


@dataclass(frozen=True, slots=True)
class RegistryStatus:
    """Everything `orchestrator status` shows, at one version. `unplaceable` maps a pool that is
    below its desired size, because no node can take another of its replicas, to why;
    `capacity` maps a pool to its learned capacity trail's summary (step changes found)."""

    version: int
    pools: tuple[PoolSpec, ...]
    replicas: tuple[ReplicaStatus, ...]
    unplaceable: Mapping[str, str] = field(default_factory=dict)
    capacity: Mapping[str, PoolCapacity] = field(default_factory=dict)
