"""The ControlPlane gRPC service over a real Registry actor, on loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from functools import partial
from typing import Any

import grpc
import pytest
import ray

from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2 as pb
from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2_grpc as pb_grpc
from orchestrator.config import default_config
from orchestrator.controlplane.grpc_service import start_control_plane_server
from orchestrator.controlplane.grpc_translate import table_from_pb
from orchestrator.controlplane.registry import start_registry
from orchestrator.controlplane.registry_records import ReplicaRegistration
from orchestrator.controlplane.watch_client import follow_routing_table
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, ReplicaLoad, ReplicaState
from orchestrator.router_service import RouterService, profile_named
from orchestrator.table.source import TableHolder

pytestmark = pytest.mark.slow
NAMESPACE = "orchestrator-grpc-test"


@pytest.fixture(scope="module")
def registry() -> Iterator[Any]:
    ray.init(address="local", num_cpus=1, include_dashboard=False, namespace=NAMESPACE)
    handle = start_registry(default_config(), namespace=NAMESPACE)
    try:
        yield handle
    finally:
        ray.kill(handle, no_restart=True)
        ray.shutdown()


def external(replica_id: str, port: int) -> pb.RegisterReplicaRequest:
    return pb.RegisterReplicaRequest(
        id=replica_id,
        url=f"http://10.1.0.9:{port}",
        pool="us-legacy",
        site="us",
        generation="AMD-Instinct-MI300X-OAM",
        engine="vllm",
    )


async def control_plane(registry: Any) -> AsyncIterator[pb_grpc.ControlPlaneServiceStub]:
    server, port = await start_control_plane_server(registry)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield pb_grpc.ControlPlaneServiceStub(channel)
    finally:
        await server.stop(grace=None)


def test_a_watcher_receives_the_new_version_within_a_second_of_a_change(registry: Any) -> None:
    async def scenario() -> None:
        async for stub in control_plane(registry):
            stream = stub.WatchRoutingTable(pb.WatchRoutingTableRequest())
            first = table_from_pb(await stream.read())
            started = time.monotonic()
            registered = await stub.RegisterReplica(external("legacy-a", 8000))
            while True:
                table = table_from_pb(await asyncio.wait_for(stream.read(), 1.0))
                if table.replica("legacy-a") is not None:
                    break
            assert time.monotonic() - started < 1.0
            assert table.version >= registered.version > first.version
            listed = table.replica("legacy-a")
            assert listed is not None
            assert listed.generation is Generation.MI300X
            assert listed.state is ReplicaState.READY
            assert table.rtt_s("kr", "us") == pytest.approx(0.150)

            await stub.Drain(pb.DrainRequest(target="legacy-a"))
            drained = table_from_pb(await asyncio.wait_for(stream.read(), 1.0))
            replica = drained.replica("legacy-a")
            assert replica is not None and replica.state is ReplicaState.DRAINING
            stream.cancel()

    asyncio.run(scenario())


def test_scale_drain_and_status_answer_with_the_desired_state(registry: Any) -> None:
    async def scenario() -> None:
        async for stub in control_plane(registry):
            await stub.Scale(pb.ScaleRequest(pool="us-mi355x", replicas=4))
            await stub.RegisterReplica(external("legacy-b", 8001))
            status = await stub.GetStatus(pb.GetStatusRequest())
            sizes = {pool.name: pool.replicas for pool in status.pools}
            assert sizes["us-mi355x"] == 4
            by_id = {replica.id: replica for replica in status.replicas}
            assert by_id["legacy-b"].observed_state == "ready"
            assert by_id["legacy-b"].replica.url == "http://10.1.0.9:8001"

    asyncio.run(scenario())


def test_unknown_pools_and_bad_registrations_are_refused_naming_what_is_wrong(
    registry: Any,
) -> None:
    async def scenario() -> None:
        async for stub in control_plane(registry):
            with pytest.raises(grpc.aio.AioRpcError) as unknown:
                await stub.Scale(pb.ScaleRequest(pool="nope", replicas=1))
            assert unknown.value.code() is grpc.StatusCode.NOT_FOUND
            assert "kr-mi300x" in (unknown.value.details() or "")
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await stub.RegisterReplica(pb.RegisterReplicaRequest(id="x", url="http://h:1"))
            assert missing.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "pool" in (missing.value.details() or "")

    asyncio.run(scenario())


def test_a_router_keeps_its_last_table_while_the_control_plane_is_down_and_catches_up_after(
    registry: Any,
) -> None:
    async def scenario() -> None:
        holder = TableHolder()
        server, port = await start_control_plane_server(registry)
        follower = asyncio.create_task(
            follow_routing_table(f"127.0.0.1:{port}", holder, retry_s=0.1)
        )
        try:
            await registry.register_replica.remote(registration("watched-a", 8010))
            await wait_until(lambda: holder.snapshot().replica("watched-a") is not None)
            await server.stop(grace=None)
            kept = holder.snapshot()
            await registry.register_replica.remote(registration("watched-b", 8011))
            await asyncio.sleep(0.5)
            assert holder.snapshot() is kept  # stale, not emptied
            server, _ = await start_control_plane_server(registry, port=port)
            await wait_until(lambda: holder.snapshot().replica("watched-b") is not None)
            assert holder.snapshot().version > kept.version
        finally:
            follower.cancel()
            await server.stop(grace=None)

    asyncio.run(scenario())


def registration(replica_id: str, port: int) -> ReplicaRegistration:
    return ReplicaRegistration(
        replica_id=replica_id,
        url=f"http://10.1.0.9:{port}",
        pool="us-legacy",
        site="us",
        generation=Generation.MI300X,
        engine=EngineKind.EXTERNAL,
    )


def listed_in(holder: TableHolder, replica_id: str) -> bool:
    return holder.snapshot().replica(replica_id) is not None


async def wait_until(check: Callable[[], bool], timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def test_each_router_sees_what_the_others_sent_a_replica_within_one_report(registry: Any) -> None:
    """Two routers following one control plane, neither scraping: the engine's one heartbeat
    reaches both, and each counts the other's requests as `others`, its own as in flight."""

    async def scenario() -> None:
        server, port = await start_control_plane_server(registry)
        routers = [
            RouterService(TableHolder(), profile_named("capacity"), scrape_replicas=False)
            for _ in range(2)
        ]
        followers = [
            asyncio.create_task(
                follow_routing_table(
                    f"127.0.0.1:{port}", r.table, retry_s=0.1, loads=r, clock=r.clock.now
                )
            )
            for r in routers
        ]
        try:
            await registry.register_replica.remote(registration("shared-a", 8020))
            for router in routers:
                await wait_until(partial(listed_in, router.table, "shared-a"))
            listed = routers[0].table.snapshot().replica("shared-a")
            assert listed is not None
            first, second = routers
            first.apply_loads([])  # make its stats for the new table
            second.apply_loads([])
            for _ in range(4):
                first.fleet.started(listed)
            for _ in range(3):
                second.fleet.started(listed)
            beat = time.monotonic()
            engine_load = ReplicaLoad(running=7, waiting=0, kv_cache_usage=0.2, observed_at_s=1.0)
            await registry.heartbeat.remote("shared-a", engine_load)

            def sees(router: RouterService, others: int) -> bool:
                stats = router.fleet.stats("shared-a")
                return stats is not None and stats.load is not None and stats.others == others

            await wait_until(lambda: sees(first, 3) and sees(second, 4), timeout_s=2.0)
            seen_after_s = time.monotonic() - beat
            print(f"\nboth routers saw the report {seen_after_s * 1000:.0f} ms after the heartbeat")
            assert seen_after_s < 1.0
        finally:
            for follower in followers:
                follower.cancel()
            await server.stop(grace=None)

    asyncio.run(scenario())
