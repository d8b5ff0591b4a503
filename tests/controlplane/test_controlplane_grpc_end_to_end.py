"""The whole control plane on a real Ray cluster, seen as a router sees it: through gRPC."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import ray
from ray.cluster_utils import Cluster
from ray_cluster import start_cluster
from test_controlplane_ray_pools import FAST_FAILURE_DETECTION, named_actors, processes_mentioning

from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2 as pb
from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2_grpc as pb_grpc
from orchestrator.config import default_config
from orchestrator.controlplane.control_plane import ControlPlane
from orchestrator.controlplane.placement import node_groups
from orchestrator.controlplane.watch_client import follow_routing_table
from orchestrator.core.generations import Generation
from orchestrator.core.records import ReplicaState
from orchestrator.table.source import TableHolder

pytestmark = pytest.mark.slow
NAMESPACE = "orchestrator-e2e"


@dataclass
class EmbeddedCluster:
    cluster: Cluster
    nodes: dict[tuple[str, Generation], Any]


@pytest.fixture
def embedded() -> Iterator[EmbeddedCluster]:
    """A cluster as `orchestrator up` makes it: one node per site and generation of the config."""
    cluster, nodes = start_cluster(
        {"num_cpus": 1, "include_dashboard": False, "_system_config": FAST_FAILURE_DETECTION},
        lambda cluster: {
            (group.site, group.generation): cluster.add_node(num_cpus=1, **group.ray_node_args())
            for group in node_groups(default_config())
        },
    )
    session = cluster.head_node.get_session_dir_path()
    try:
        cluster.connect(namespace=NAMESPACE)
        yield EmbeddedCluster(cluster, nodes)
    finally:
        ray.shutdown()
        cluster.shutdown()
    deadline = time.monotonic() + 15
    while processes_mentioning(session):
        assert time.monotonic() < deadline, "Ray processes left running after shutdown"
        time.sleep(0.2)


def test_a_router_following_the_control_plane_sees_four_ready_replicas_of_two_generations(
    embedded: EmbeddedCluster,
) -> None:
    async def scenario() -> None:
        control_plane = ControlPlane(default_config(), namespace=NAMESPACE, port=0)
        port = await control_plane.start()
        holder = TableHolder()
        follower = asyncio.create_task(follow_routing_table(f"127.0.0.1:{port}", holder))
        try:
            deadline = time.monotonic() + 45
            while sum(r.state is ReplicaState.READY for r in holder.snapshot().replicas) < 4:
                assert time.monotonic() < deadline, "4 ready replicas not within 45 s"
                await asyncio.sleep(0.2)
            replicas = holder.snapshot().replicas
            by_generation = {
                generation: [r for r in replicas if r.generation is generation]
                for generation in (Generation.MI300X, Generation.MI355X)
            }
            assert {r.site for r in by_generation[Generation.MI300X]} == {"kr"}
            assert {r.site for r in by_generation[Generation.MI355X]} == {"us"}
            assert len(by_generation[Generation.MI300X]) == len(by_generation[Generation.MI355X])
            mi300x = by_generation[Generation.MI300X][0].capacity_prior_tokens_per_s
            mi355x = by_generation[Generation.MI355X][0].capacity_prior_tokens_per_s
            assert mi355x > mi300x > 0

            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                status = await pb_grpc.ControlPlaneServiceStub(channel).GetStatus(
                    pb.GetStatusRequest()
                )
            assert {(p.name, p.replicas) for p in status.pools} == {
                ("kr-mi300x", 2),
                ("us-mi355x", 2),
            }
            assert {r.observed_state for r in status.replicas} == {"ready"}
        finally:
            follower.cancel()
            await control_plane.stop(remove_registry=True)
        assert not [a for a in named_actors() if a["name"].startswith("replica-")]

    asyncio.run(scenario())


def test_a_router_stops_seeing_a_killed_nodes_replicas_within_5_s_and_keeps_the_rest(
    embedded: EmbeddedCluster,
) -> None:
    async def scenario() -> None:
        control_plane = ControlPlane(default_config(), namespace=NAMESPACE, port=0)
        port = await control_plane.start()
        holder = TableHolder()
        follower = asyncio.create_task(follow_routing_table(f"127.0.0.1:{port}", holder))

        def ready(site: str) -> int:
            return sum(
                r.site == site and r.state is ReplicaState.READY for r in holder.snapshot().replicas
            )

        try:
            await until(lambda: ready("kr") == 2 and ready("us") == 2, 45)
            embedded.cluster.remove_node(
                embedded.nodes[("kr", Generation.MI300X)], allow_graceful=False
            )
            started = time.monotonic()
            await until(lambda: ready("kr") == 0, 5)
            print(f"the router dropped the lost replicas after {time.monotonic() - started:.1f} s")
            assert ready("us") == 2, [(r.replica_id, r.state) for r in holder.snapshot().replicas]
            await asyncio.sleep(2)
            assert control_plane.reconciler is not None
            (unplaceable,) = control_plane.reconciler.unplaceable
            assert unplaceable.pool == "kr-mi300x"
            assert "site 'kr'" in unplaceable.reason
        finally:
            follower.cancel()
            await control_plane.stop(remove_registry=True)

    asyncio.run(scenario())


async def until(check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s"
        await asyncio.sleep(0.05)
