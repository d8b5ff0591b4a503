"""Records to `orchestrator.controlplane.v1` messages and back: the one place the two meet.

Both directions of the routing table are here, so a watcher turns a snapshot back into exactly the
`RoutingTable` the registry made.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2 as pb
from orchestrator.controlplane.registry_state import RegistryStatus, ReplicaRegistration
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.generations import parse_generation
from orchestrator.core.records import EngineKind, NodeHealth, Replica, ReplicaState, Site
from orchestrator.table.snapshot import RoutingTable

_STATE_TO_PB: Final = MappingProxyType(
    {
        ReplicaState.READY: pb.REPLICA_STATE_READY,
        ReplicaState.DRAINING: pb.REPLICA_STATE_DRAINING,
        ReplicaState.UNHEALTHY: pb.REPLICA_STATE_UNHEALTHY,
    }
)
_STATE_FROM_PB: Final = MappingProxyType({v: k for k, v in _STATE_TO_PB.items()})
_HEALTH_TO_PB: Final = MappingProxyType(
    {
        NodeHealth.HEALTHY: pb.NODE_HEALTH_HEALTHY,
        NodeHealth.DEGRADED: pb.NODE_HEALTH_DEGRADED,
        NodeHealth.UNHEALTHY: pb.NODE_HEALTH_UNHEALTHY,
    }
)
_HEALTH_FROM_PB: Final[Mapping[int, NodeHealth]] = MappingProxyType(
    {int(pb.NODE_HEALTH_UNSPECIFIED): NodeHealth.HEALTHY}
    | {int(v): k for k, v in _HEALTH_TO_PB.items()}
)


def replica_to_pb(replica: Replica) -> pb.Replica:
    return pb.Replica(
        id=replica.replica_id,
        url=replica.url,
        model=replica.model,
        pool=replica.pool,
        site=replica.site,
        generation=replica.generation.value,
        engine=replica.engine.value,
        capacity_prior_tokens_per_s=replica.capacity_prior_tokens_per_s,
        node=replica.node,
        state=_STATE_TO_PB[replica.state],
        node_health=_HEALTH_TO_PB[replica.node_health],
    )


def table_to_pb(table: RoutingTable) -> pb.RoutingTableSnapshot:
    return pb.RoutingTableSnapshot(
        version=table.version,
        replicas=[replica_to_pb(replica) for replica in table.replicas],
        sites=[pb.Site(name=site.name, rtt_s=dict(site.rtt_s)) for site in table.sites.values()],
    )


def table_from_pb(snapshot: pb.RoutingTableSnapshot) -> RoutingTable:
    """The `RoutingTable` a snapshot carries, as a router's `TableHolder` takes it."""
    replicas = tuple(
        Replica(
            replica_id=r.id,
            url=r.url,
            model=r.model,
            pool=r.pool,
            site=r.site,
            generation=parse_generation(r.generation),
            engine=EngineKind(r.engine),
            capacity_prior_tokens_per_s=r.capacity_prior_tokens_per_s,
            node=r.node,
            state=_STATE_FROM_PB.get(r.state, ReplicaState.UNHEALTHY),
            node_health=_HEALTH_FROM_PB.get(r.node_health, NodeHealth.HEALTHY),
        )
        for r in snapshot.replicas
    )
    sites = MappingProxyType({s.name: Site(s.name, dict(s.rtt_s)) for s in snapshot.sites})
    return RoutingTable(snapshot.version, replicas, sites)


def registration_from_pb(request: pb.RegisterReplicaRequest) -> ReplicaRegistration:
    """Raises INVALID_ARGUMENT naming the field for a missing id, url, pool or site, or an
    unknown generation or engine."""
    for field in ("id", "url", "pool", "site"):
        if not getattr(request, field):
            raise OrchestratorError(ErrorCode.INVALID_ARGUMENT, "required", param=field)
    try:
        engine = EngineKind((request.engine or EngineKind.EXTERNAL.value).lower())
    except ValueError:
        allowed = ", ".join(kind.value for kind in EngineKind)
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            f"unknown engine {request.engine!r}; engines: {allowed}",
            param="engine",
        ) from None
    return ReplicaRegistration(
        replica_id=request.id,
        url=request.url.rstrip("/"),
        pool=request.pool,
        site=request.site,
        generation=parse_generation(request.generation),
        engine=engine,
        node=request.node,
        time_scale=request.time_scale or 1.0,
        external=True,
    )


def health_from_pb(health: int) -> NodeHealth:
    return _HEALTH_FROM_PB.get(health, NodeHealth.HEALTHY)


def status_to_pb(status: RegistryStatus) -> pb.GetStatusResponse:
    pools = [
        pb.PoolStatus(
            name=pool.name,
            site=pool.site,
            generation=pool.generation.value,
            engine=pool.engine.value,
            replicas=pool.replicas,
            unplaceable=status.unplaceable.get(pool.name, ""),
        )
        for pool in status.pools
    ]
    replicas = []
    for entry in status.replicas:
        load = entry.record.load
        replicas.append(
            pb.ReplicaStatus(
                id=entry.record.replica_id,
                pool=entry.record.registration.pool,
                replica=replica_to_pb(entry.listed) if entry.listed is not None else None,
                observed_state=entry.record.state.value,
                running=load.running if load else 0,
                waiting=load.waiting if load else 0,
                kv_cache_usage=load.kv_cache_usage if load else 0.0,
                heartbeat_age_s=entry.heartbeat_age_s,
            )
        )
    return pb.GetStatusResponse(version=status.version, pools=pools, replicas=replicas)
