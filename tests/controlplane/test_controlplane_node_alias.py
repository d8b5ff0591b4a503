"""Node health by Kubernetes node name: a report for the name a node's exporter knows reaches the
replicas on the Ray node whose `k8s-node` label carries it, and only those.

A real Ray cluster: a head and two us/MI355X worker nodes labelled `k8s-node=gpu-node-7` and
`k8s-node=gpu-node-8` (as the chart's worker pods are), one simulated replica placed on each by the
real reconciler; reports go through the real gRPC service.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import ray
from ray_cluster import start_cluster

from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2 as pb
from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2_grpc as pb_grpc
from orchestrator.config import default_config
from orchestrator.controlplane.grpc_service import start_control_plane_server
from orchestrator.controlplane.placement import GPU_SLOT_RESOURCE, K8S_NODE_LABEL, SITE_LABEL
from orchestrator.controlplane.reconciler import PoolReconciler
from orchestrator.controlplane.registry import start_registry
from orchestrator.core.records import NodeHealth, Replica, ReplicaState
from orchestrator.table.snapshot import RoutingTable

pytestmark = pytest.mark.slow

NAMESPACE = "orchestrator-node-alias-test"
MI355X = "AMD-Instinct-MI355X-OAM"
POOL = "us-mi355x"


def labelled_node(k8s_node: str) -> dict[str, Any]:
    return {
        "num_cpus": 1,
        "num_gpus": 0,
        "labels": {SITE_LABEL: "us", K8S_NODE_LABEL: k8s_node},
        "resources": {f"accelerator_type:{MI355X}": 1, GPU_SLOT_RESOURCE: 1},
    }


@dataclass
class World:
    registry: Any
    ray_node_of: dict[str, str]  # k8s node name → Ray node id

    def table(self) -> RoutingTable:
        table: RoutingTable = ray.get(self.registry.snapshot.remote(), timeout=10)
        return table

    def replica_on(self, k8s_node: str) -> Replica:
        (replica,) = [r for r in self.table().replicas if r.node == self.ray_node_of[k8s_node]]
        return replica


def eventually(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    cluster, nodes = start_cluster(
        {"num_cpus": 1, "include_dashboard": False},
        lambda cluster: {
            name: cluster.add_node(**labelled_node(name)) for name in ("gpu-node-7", "gpu-node-8")
        },
    )
    stop = threading.Event()
    reconciler: PoolReconciler | None = None
    thread: threading.Thread | None = None
    registry = None
    try:
        cluster.connect(namespace=NAMESPACE)
        config = default_config()
        registry = start_registry(config, namespace=NAMESPACE)
        ray.get(registry.scale.remote("kr-mi300x", 0), timeout=10)
        ray.get(registry.scale.remote(POOL, 2), timeout=10)
        reconciler = PoolReconciler(registry, model=config.model, namespace=NAMESPACE)
        thread = threading.Thread(target=reconciler.run, args=(stop, 0.5), daemon=True)
        thread.start()
        world = World(registry, {name: node.node_id for name, node in nodes.items()})
        eventually(
            lambda: sum(r.state is ReplicaState.READY for r in world.table().replicas) == 2,
            45,
            "one ready replica on each labelled node",
        )
        yield world
    finally:
        stop.set()
        if thread is not None:
            thread.join(timeout=15)
        if reconciler is not None:
            reconciler.shutdown()
        if registry is not None:
            ray.kill(registry, no_restart=True)
        ray.shutdown()
        cluster.shutdown()


def report(registry: Any, node: str, health: Any) -> None:
    """One `ReportNodeHealth` through a real gRPC server over `registry`."""

    async def call() -> None:
        server, port = await start_control_plane_server(registry)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub: Any = pb_grpc.ControlPlaneServiceStub(channel)  # type: ignore[no-untyped-call]
                await stub.ReportNodeHealth(
                    pb.ReportNodeHealthRequest(node=node, health=health), timeout=10
                )
        finally:
            await server.stop(grace=None)

    asyncio.run(call())


def test_a_report_for_a_kubernetes_node_name_marks_the_replicas_on_its_ray_node(
    world: World,
) -> None:
    assert world.replica_on("gpu-node-7").node_health is NodeHealth.HEALTHY
    report(world.registry, "gpu-node-7", pb.NODE_HEALTH_UNHEALTHY)
    assert world.replica_on("gpu-node-7").node_health is NodeHealth.UNHEALTHY
    assert world.replica_on("gpu-node-8").node_health is NodeHealth.HEALTHY, "only that node"

    report(world.registry, "gpu-node-7", pb.NODE_HEALTH_HEALTHY)
    assert world.replica_on("gpu-node-7").node_health is NodeHealth.HEALTHY


def test_a_report_by_ray_node_id_still_works(world: World) -> None:
    report(world.registry, world.ray_node_of["gpu-node-8"], pb.NODE_HEALTH_DEGRADED)
    assert world.replica_on("gpu-node-8").node_health is NodeHealth.DEGRADED
    assert world.replica_on("gpu-node-7").node_health is NodeHealth.HEALTHY
    report(world.registry, world.ray_node_of["gpu-node-8"], pb.NODE_HEALTH_HEALTHY)


def test_an_unknown_node_name_is_accepted_and_affects_no_replica(world: World) -> None:
    before = {r.replica_id: r.node_health for r in world.table().replicas}
    report(world.registry, "gpu-node-99", pb.NODE_HEALTH_UNHEALTHY)
    after = {r.replica_id: r.node_health for r in world.table().replicas}
    assert after == before == dict.fromkeys(before, NodeHealth.HEALTHY)


def test_an_empty_node_name_is_refused_with_invalid_argument(world: World) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        report(world.registry, " ", pb.NODE_HEALTH_UNHEALTHY)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "node name" in (refused.value.details() or "")
