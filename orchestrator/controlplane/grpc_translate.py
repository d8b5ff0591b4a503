"""Records to `orchestrator.controlplane.v1` messages and back: the one place the two meet.

Both directions of the routing table are here, so a watcher turns a snapshot back into exactly the
`RoutingTable` the registry made.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2 as pb
from orchestrator.controlplane.registry_records import RegistryStatus, ReplicaRegistration
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.generations import parse_generation
from orchestrator.core.records import (
    EngineKind,
    LoadReport,
    NodeHealth,
    Replica,
    ReplicaLoad,
    ReplicaState,
    Site,
)
from orchestrator.table.snapshot import LoadDelta, RoutingTable

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
        engine_version=replica.engine_version,
    )


def load_to_pb(report: LoadReport) -> pb.ReplicaLoad:
    load = report.load
    message = pb.ReplicaLoad(
        replica_id=report.replica_id,
        known=load is not None,
        age_s=report.age_s,
        capacity_tokens_per_s=report.capacity_tokens_per_s or 0.0,
        adapter_errors_total=report.adapter_errors_total,
        adapter_error=report.problem,
    )
    if load is not None:
        message.running = load.running
        message.waiting = load.waiting
        message.kv_cache_usage = load.kv_cache_usage
        if load.prompt_tokens_total is not None:
            message.prompt_tokens_total = load.prompt_tokens_total
        if load.generation_tokens_total is not None:
            message.generation_tokens_total = load.generation_tokens_total
    return message


def load_from_pb(message: pb.ReplicaLoad, received_at_s: float) -> LoadReport:
    """The report a message carries; its load is stamped `received_at_s − age_s` (receiver's
    clock), so how old it is can be told without comparing two machines' clocks."""
    load = None
    if message.known:
        load = ReplicaLoad(
            running=message.running,
            waiting=message.waiting,
            kv_cache_usage=message.kv_cache_usage,
            prompt_tokens_total=message.prompt_tokens_total
            if message.HasField("prompt_tokens_total")
            else None,
            generation_tokens_total=message.generation_tokens_total
            if message.HasField("generation_tokens_total")
            else None,
            observed_at_s=received_at_s - message.age_s,
        )
    return LoadReport(
        replica_id=message.replica_id,
        load=load,
        age_s=message.age_s,
        capacity_tokens_per_s=message.capacity_tokens_per_s or None,
        adapter_errors_total=message.adapter_errors_total,
        problem=message.adapter_error,
    )


def table_to_pb(table: RoutingTable, *, with_loads: bool = True) -> pb.RoutingTableSnapshot:
    return pb.RoutingTableSnapshot(
        version=table.version,
        replicas=[replica_to_pb(replica) for replica in table.replicas],
        sites=[pb.Site(name=site.name, rtt_s=dict(site.rtt_s)) for site in table.sites.values()],
        load_version=table.load_version,
        loads=[load_to_pb(report) for report in table.loads.values()] if with_loads else [],
    )


def delta_to_pb(delta: LoadDelta) -> pb.RoutingTableSnapshot:
    return pb.RoutingTableSnapshot(
        version=delta.version,
        load_version=delta.load_version,
        loads=[load_to_pb(report) for report in delta.loads],
        loads_only=True,
    )


def delta_from_pb(message: pb.RoutingTableSnapshot, received_at_s: float) -> LoadDelta:
    return LoadDelta(
        message.version,
        message.load_version,
        tuple(load_from_pb(load, received_at_s) for load in message.loads),
    )


def table_from_pb(snapshot: pb.RoutingTableSnapshot, received_at_s: float = 0.0) -> RoutingTable:
    """The `RoutingTable` a snapshot carries, as a router's `TableHolder` takes it; its loads are
    dated on the receiver's clock, `received_at_s`."""
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
            engine_version=r.engine_version,
        )
        for r in snapshot.replicas
    )
    sites = MappingProxyType({s.name: Site(s.name, dict(s.rtt_s)) for s in snapshot.sites})
    loads = MappingProxyType(
        {load.replica_id: load_from_pb(load, received_at_s) for load in snapshot.loads}
    )
    return RoutingTable(
        snapshot.version, replicas, sites, loads=loads, load_version=snapshot.load_version
    )


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
        engine_version=request.engine_version,
    )


def health_from_pb(health: int) -> NodeHealth:
    return _HEALTH_FROM_PB.get(health, NodeHealth.HEALTHY)


def status_to_pb(status: RegistryStatus) -> pb.GetStatusResponse:
    pools = []
    for pool in status.pools:
        capacity = status.capacity.get(pool.name)
        last_step = None if capacity is None else capacity.last_step
        pools.append(
            pb.PoolStatus(
                name=pool.name,
                site=pool.site,
                generation=pool.generation.value,
                engine=pool.engine.value,
                replicas=pool.replicas,
                unplaceable=status.unplaceable.get(pool.name, ""),
                capacity_step_changes=0 if capacity is None else capacity.step_changes_total,
                last_capacity_step_ratio=0.0 if last_step is None else last_step.ratio,
            )
        )
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
                load=None if entry.load is None else load_to_pb(entry.load),
            )
        )
    return pb.GetStatusResponse(version=status.version, pools=pools, replicas=replicas)
