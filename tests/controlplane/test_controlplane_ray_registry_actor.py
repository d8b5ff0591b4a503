"""The Registry actor on a local Ray runtime: what survives a restart; external endpoints."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import ray

from orchestrator.config import default_config
from orchestrator.config.schema import OrchestratorConfig, PoolSpec
from orchestrator.controlplane.external_pools import ExternalReplicaChecker
from orchestrator.controlplane.registry import start_registry
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, ReplicaState
from orchestrator.sim.replica import ReplicaSettings, running_replica
from orchestrator.table.snapshot import RoutingTable

pytestmark = pytest.mark.slow
NAMESPACE = "orchestrator-registry-test"


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=1, include_dashboard=False, namespace=NAMESPACE)
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


def state_of(registry: Any, replica_id: str) -> ReplicaState | None:
    table: RoutingTable = ray.get(registry.snapshot.remote(), timeout=10)
    replica = table.replica(replica_id)
    return replica.state if replica is not None else None


async def until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s"
        await asyncio.sleep(0.1)
