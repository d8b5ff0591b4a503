"""The Registry actor on a local Ray runtime: what survives a restart, its errors, external
replicas (configured or registered over gRPC) and their health checks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
import ray

from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2 as pb
from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2_grpc as pb_grpc
from orchestrator.config import default_config
from orchestrator.config.schema import ClientTlsSpec, OrchestratorConfig, PoolSpec
from orchestrator.controlplane.checker_actor import checker_shares
from orchestrator.controlplane.control_plane import ControlPlane
from orchestrator.controlplane.external_pools import ExternalReplicaChecker, external_registrations
from orchestrator.controlplane.grpc_service import start_control_plane_server
from orchestrator.controlplane.registry import start_registry
from orchestrator.controlplane.registry_records import ReplicaRegistration
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, ReplicaState
from orchestrator.sim.replica import ReplicaSettings, running_replica
from orchestrator.table.snapshot import RoutingTable

pytestmark = pytest.mark.slow
NAMESPACE = "orchestrator-registry-test"


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(address="local", num_cpus=1, include_dashboard=False, namespace=NAMESPACE)
    try:
        yield
    finally:
        ray.shutdown()


def sizes(registry: Any) -> dict[str, int | None]:
    status = ray.get(registry.status.remote(), timeout=10)
    return {pool.name: pool.replicas for pool in status.pools}


def restarted(name: str, config: OrchestratorConfig, registry: Any) -> Any:
    ray.kill(registry, no_restart=True)
    return start_registry(config, name=name, namespace=NAMESPACE)


def test_sizes_set_by_scale_and_drain_survive_a_new_registry_with_the_same_config(
    local_ray: None,
) -> None:
    config = default_config()
    registry = start_registry(config, name="same-config", namespace=NAMESPACE)
    ray.get(registry.scale.remote("kr-mi300x", 5), timeout=10)
    ray.get(registry.drain.remote("us-mi355x"), timeout=10)
    registry = restarted("same-config", config, registry)
    assert sizes(registry) == {"kr-mi300x": 5, "us-mi355x": 0}
    ray.kill(registry, no_restart=True)


def test_a_registry_started_with_an_edited_config_takes_that_configs_sizes(
    local_ray: None,
) -> None:
    registry = start_registry(default_config(), name="edited-config", namespace=NAMESPACE)
    ray.get(registry.scale.remote("kr-mi300x", 5), timeout=10)
    edited = default_config().model_copy(update={"model": "openai/gpt-oss-20b"})
    registry = restarted("edited-config", edited, registry)
    assert sizes(registry) == {"kr-mi300x": 2, "us-mi355x": 2}
    ray.kill(registry, no_restart=True)


def test_an_external_endpoint_is_listed_while_it_answers_and_unhealthy_once_it_stops(
    local_ray: None,
) -> None:
    async def scenario() -> None:
        settings = ReplicaSettings(Generation.MI300X, time_scale=0.0)
        async with contextlib.AsyncExitStack() as stack:
            url = await stack.enter_async_context(running_replica(settings))
            legacy = PoolSpec(
                name="us-legacy",
                site="us",
                generation=Generation.MI300X,
                engine=EngineKind.EXTERNAL,
                endpoints=(url, "http://127.0.0.1:9"),  # the second never answers
            )
            config = default_config().model_copy(
                update={"pools": (*default_config().pools, legacy)}
            )
            registry = start_registry(
                config, name="external", namespace=NAMESPACE, heartbeat_timeout_s=1.0
            )
            checker = asyncio.create_task(
                ExternalReplicaChecker(config, registry, interval_s=0.2).run()
            )
            try:
                await until(lambda: state_of(registry, "us-legacy-0") is ReplicaState.READY)
                assert state_of(registry, "us-legacy-1") is None
                await stack.aclose()  # the endpoint goes away
                await until(lambda: state_of(registry, "us-legacy-0") is ReplicaState.UNHEALTHY)
            finally:
                checker.cancel()
                ray.kill(registry, no_restart=True)

    asyncio.run(scenario())


def test_a_restarted_registry_hands_watchers_no_table_until_its_replicas_have_re_registered(
    local_ray: None,
) -> None:
    registry = start_registry(
        default_config(), name="rebuilding", namespace=NAMESPACE, heartbeat_timeout_s=30.0
    )
    replicas = [
        ReplicaRegistration(f"{pool}-{n}", f"http://127.0.0.1:{9100 + i}", pool, site, generation,
                            EngineKind.SIM, node="n1")
        for i, (pool, site, generation, n) in enumerate(
            [("kr-mi300x", "kr", Generation.MI300X, n) for n in (1, 2)]
            + [("us-mi355x", "us", Generation.MI355X, n) for n in (1, 2)]
        )
    ]  # fmt: skip
    try:
        for replica in replicas:
            ray.get(registry.register_replica.remote(replica), timeout=10)
        before: RoutingTable = ray.get(registry.snapshot.remote(), timeout=10)
        ray.kill(registry, no_restart=False)
        watching = registry.wait_for_version.remote(before.version, 20.0)
        handed_out, _ = ray.wait([watching], timeout=1.0)
        assert not handed_out, "a restarted, still empty registry handed a watcher its table"
        for replica in replicas:
            ray.get(registry.register_replica.remote(replica), timeout=10)
        rebuilt: RoutingTable = ray.get(watching, timeout=5)
        assert {r.replica_id for r in rebuilt.replicas} == {r.replica_id for r in replicas}
        assert rebuilt.version > before.version
    finally:
        ray.kill(registry, no_restart=True)


def test_a_refused_registry_call_reaches_the_caller_as_the_canonical_error(
    local_ray: None,
) -> None:
    registry = start_registry(default_config(), name="refusing", namespace=NAMESPACE)
    try:
        with pytest.raises(OrchestratorError) as caught:
            ray.get(registry.scale.remote("no-such-pool", 1), timeout=10)
        assert caught.value.code is ErrorCode.NOT_FOUND
        assert "kr-mi300x" in caught.value.message
    finally:
        ray.kill(registry, no_restart=True)


def test_a_replica_registered_over_grpc_is_health_checked_out_of_and_back_into_the_table(
    local_ray: None,
) -> None:
    """Registered, it stays ready past the heartbeat timeout only because the checker heartbeats
    it; stopped, it turns unhealthy; restarted on its address, it is ready again."""

    async def scenario() -> None:
        settings = ReplicaSettings(Generation.MI300X, time_scale=0.0)
        registry = start_registry(
            default_config(), name="registered", namespace=NAMESPACE, heartbeat_timeout_s=1.0
        )
        server, port = await start_control_plane_server(registry)
        checker = asyncio.create_task(
            ExternalReplicaChecker(default_config(), registry, interval_s=0.2).run()
        )
        try:
            async with running_replica(settings) as url:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                    stub: Any = pb_grpc.ControlPlaneServiceStub(channel)  # type: ignore[no-untyped-call]
                    await stub.RegisterReplica(
                        pb.RegisterReplicaRequest(
                            id="us-vllm-7",
                            url=url,
                            pool="us-legacy",
                            site="us",
                            generation="MI300X",
                            engine="sim",
                        )
                    )
                await until(lambda: state_of(registry, "us-vllm-7") is ReplicaState.READY)
                await asyncio.sleep(2.0)  # twice the heartbeat timeout
                assert state_of(registry, "us-vllm-7") is ReplicaState.READY
            await until(lambda: state_of(registry, "us-vllm-7") is ReplicaState.UNHEALTHY)
            replica_port = int(url.rsplit(":", 1)[1])
            async with running_replica(settings, port=replica_port):
                await until(lambda: state_of(registry, "us-vllm-7") is ReplicaState.READY)
        finally:
            checker.cancel()
            await server.stop(grace=None)
            ray.kill(registry, no_restart=True)

    asyncio.run(scenario())


def state_of(registry: Any, replica_id: str) -> ReplicaState | None:
    table: RoutingTable = ray.get(registry.snapshot.remote(), timeout=10)
    replica = table.replica(replica_id)
    return replica.state if replica is not None else None


async def until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s"
        await asyncio.sleep(0.1)


def external(name: str, endpoints: int) -> PoolSpec:
    urls = tuple(f"http://10.0.{i // 250}.{i % 250}:8000" for i in range(endpoints))
    return PoolSpec(
        name=name, site="us", generation=Generation.MI300X, engine=EngineKind.EXTERNAL,
        endpoints=urls,
    )  # fmt: skip


def test_shares_of_checked_endpoints_pack_small_pools_and_none_for_a_small_fleet() -> None:
    config = default_config().model_copy(
        update={"pools": (external("a", 40), external("b", 30), external("c", 100))}
    )
    shares = checker_shares(config, per_checker=64)
    assert [[p.name for p in share.config.pools] for share in shares] == [
        ["a"],
        ["b"],
        ["c"],
        ["c"],
    ]
    assert checker_shares(config, per_checker=170) == []  # one process checks 170 pages
    packed = [[p.name for p in s.config.pools] for s in checker_shares(config, 80)]
    assert packed == [["a", "b"], ["c"], ["c"]]


def test_one_large_external_pool_is_cut_into_shares_with_its_replica_ids_kept() -> None:
    """One pool of 512 endpoints (a whole external cluster) is eight checkers' work, not one's;
    each endpoint is checked by exactly one of them, under the id it has in the control plane."""
    config = default_config().model_copy(update={"pools": (external("crusoe", 512),)})
    shares = checker_shares(config, per_checker=64)
    assert len(shares) == 8 and all(len(share.replica_ids) <= 64 for share in shares)
    ids = [replica_id for share in shares for replica_id in share.replica_ids]
    assert sorted(ids) == sorted(r.replica_id for r in external_registrations(config))
    assert len(ids) == len(set(ids)) == 512


def test_with_replica_tls_every_external_endpoint_is_checked_in_the_control_plane(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The replica TLS files are mounted in the control plane's pod alone: checker actors on other
    nodes would fail every check, so there are none, and the log says why."""
    tls = ClientTlsSpec(caFile="/etc/orchestrator/replica-tls/ca.crt")
    config = default_config().model_copy(update={"pools": (external("crusoe", 512),)})
    config = config.model_copy(
        update={"control_plane": config.control_plane.model_copy(update={"replica_tls": tls})}
    )
    with caplog.at_level(logging.WARNING, logger="orchestrator.controlplane.checker_actor"):
        assert checker_shares(config, per_checker=64) == []
    assert "replicaTls" in caplog.text and "512" in caplog.text


def test_past_its_share_of_endpoints_the_control_plane_checks_them_in_checker_actors(
    local_ray: None,
) -> None:
    """A control plane told to check one endpoint per process at most starts a checker actor for
    its external pool: a simulated engine there is listed with the load its page reports, in the
    table routers get; stopping the control plane removes the actor."""

    async def scenario() -> None:
        settings = ReplicaSettings(Generation.MI300X, time_scale=0.0)
        async with running_replica(settings) as url:
            pool = PoolSpec(
                name="us-shard",
                site="us",
                generation=Generation.MI300X,
                engine=EngineKind.EXTERNAL,
                endpoints=(url,),
            )
            config = default_config().model_copy(update={"pools": (pool,)})
            control_plane = ControlPlane(
                config,
                namespace=NAMESPACE,
                registry_name="sharded",
                port=0,
                endpoints_per_checker=0,
            )
            await control_plane.start()
            try:

                def listed_with_load() -> bool:
                    table: RoutingTable = ray.get(
                        control_plane.registry.snapshot.remote(), timeout=10
                    )
                    report = table.loads.get("us-shard-0")
                    return report is not None and report.load is not None

                await until(listed_with_load)
                (checker,) = control_plane.checker_actors
                assert isinstance(await checker.start.remote(), int)  # already checking
            finally:
                await control_plane.stop(remove_registry=True)
            assert control_plane.checker_actors == ()

    asyncio.run(scenario())
