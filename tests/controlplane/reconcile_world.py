"""A tiny model of the cluster for reconcile tests: carry actions out the way the Ray side would."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from orchestrator.config import PoolSpec
from orchestrator.controlplane.reconcile import (
    Action,
    DrainReplica,
    ForgetReplica,
    NodeInfo,
    ObservedReplica,
    ObservedState,
    StartReplica,
    StopReplica,
)

MI300X = "AMD-Instinct-MI300X-OAM"
MI355X = "AMD-Instinct-MI355X-OAM"


def pool(name: str, site: str, generation: str, replicas: int, gpus: int = 1) -> PoolSpec:
    return PoolSpec.model_validate(
        {
            "name": name,
            "site": site,
            "generation": generation,
            "engine": "sim",
            "replicas": replicas,
            "gpusPerReplica": gpus,
        }
    )


def node(
    node_id: str, site: str | None, accelerator: str | None, gpus_free: int = 8, alive: bool = True
) -> NodeInfo:
    return NodeInfo(node_id, site, accelerator, gpus_free, alive)


def replica(
    replica_id: str,
    pool_name: str,
    node_id: str,
    state: str = "ready",
    since_s: float | None = None,
) -> ObservedReplica:
    return ObservedReplica(replica_id, pool_name, node_id, ObservedState(state), since_s)


def apply(
    actions: Sequence[Action],
    pools: Sequence[PoolSpec],
    observed: Sequence[ObservedReplica],
    nodes: Sequence[NodeInfo],
) -> tuple[list[ObservedReplica], list[NodeInfo]]:
    """The next observation after carrying `actions` out.

    A started replica is `starting` and holds its GPUs; a drained one is `draining`; stopped and
    forgotten ones are gone from the list. GPUs a stop releases show up only in a later
    observation (Ray reports them), so they are not returned here.
    """
    gpus = {p.name: p.gpus_per_replica for p in pools}
    replicas = {r.replica_id: r for r in observed}
    free = {n.node_id: n.gpus_free for n in nodes}
    for number, action in enumerate(actions):
        if isinstance(action, StartReplica):
            new_id = f"{action.pool}-new-{number}"
            replicas[new_id] = replica(new_id, action.pool, action.node, "starting")
            free[action.node] -= gpus[action.pool]
        elif isinstance(action, DrainReplica):
            drained = replicas[action.replica_id]
            replicas[action.replica_id] = dataclasses.replace(drained, state=ObservedState.DRAINING)
        elif isinstance(action, StopReplica | ForgetReplica):
            del replicas[action.replica_id]
    return (
        list(replicas.values()),
        [dataclasses.replace(n, gpus_free=free[n.node_id]) for n in nodes],
    )
