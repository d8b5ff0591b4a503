"""The control plane's Kubernetes pools, end to end on loopback: pods in a local API server,
simulated engines at the pods' IPs (127.0.0.2, 127.0.0.3), the real registry actor and the real
external-replica checker. Ready pods join the routing table within seconds; pods that turn
unready or are deleted leave it; a replica the registry lost is registered again."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import ray
from fake_apiserver import running_apiserver
from kubernetes import client

from orchestrator.config import parse_config
from orchestrator.config.schema import OrchestratorConfig
from orchestrator.controlplane.external_pools import ExternalReplicaChecker
from orchestrator.controlplane.kubernetes_pools import KubernetesPools, discovered_pools
from orchestrator.controlplane.registry import start_registry
from orchestrator.core.generations import Generation
from orchestrator.core.records import ReplicaState
from orchestrator.sim.replica import ReplicaSettings, running_replica
from orchestrator.table.snapshot import RoutingTable

pytestmark = pytest.mark.slow
NAMESPACE = "orchestrator-discovery-test"
LABELS = {"app.kubernetes.io/name": "sglang", "orchestrator.io/pool": "us-sglang"}
POD_IPS = ("127.0.0.2", "127.0.0.3")


def config_with_discovered_pool(port: int) -> OrchestratorConfig:
    return parse_config(
        f"""
apiVersion: orchestrator/v1alpha1
kind: Orchestrator
sites: {{kr: {{rttMs: {{us: 150}}}}, us: {{}}}}
pools:
  - {{name: kr-fixed, site: kr, generation: MI300X, engine: external,
     endpoints: ["http://127.0.0.1:9"]}}
  - name: us-sglang
    site: us
    generation: MI355X
    engine: external
    selector: {{app.kubernetes.io/name: sglang, orchestrator.io/pool: us-sglang}}
    port: {port}
"""
    )


def free_port_on(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(address="local", num_cpus=1, include_dashboard=False, namespace=NAMESPACE)
    try:
        yield
    finally:
        ray.shutdown()


def table_states(registry: Any) -> dict[str, ReplicaState]:
    table: RoutingTable = ray.get(registry.snapshot.remote(), timeout=10)
    return {r.replica_id: r.state for r in table.replicas if r.pool == "us-sglang"}


async def until(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> float:
    """Seconds until `check` held; fails after `timeout_s`."""
    started = time.monotonic()
    while not await asyncio.to_thread(check):
        assert time.monotonic() - started < timeout_s, f"not within {timeout_s:g} s: {what}"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def test_only_external_pools_with_a_selector_are_discovered() -> None:
    config = config_with_discovered_pool(8000)
    assert [pool.name for pool in discovered_pools(config)] == ["us-sglang"]


def test_ready_pods_join_the_routing_table_and_leave_it_when_unready_or_deleted(
    local_ray: None,
) -> None:
    port = free_port_on(POD_IPS[0])
    config = config_with_discovered_pool(port)

    async def scenario() -> None:
        settings = ReplicaSettings(Generation.MI355X, time_scale=0.0)
        async with contextlib.AsyncExitStack() as stack:
            for ip in POD_IPS:
                await stack.enter_async_context(running_replica(settings, host=ip, port=port))
            with running_apiserver() as server:
                configuration = client.Configuration()
                configuration.host = server.url
                api = client.CoreV1Api(client.ApiClient(configuration))
                registry = start_registry(
                    config, name="discovery", namespace=NAMESPACE, heartbeat_timeout_s=2.0
                )
                pools = KubernetesPools(
                    config, registry, api_factory=lambda: api, namespace="llm", resync_s=0.3
                )
                tasks = [
                    asyncio.create_task(pools.run()),
                    asyncio.create_task(
                        ExternalReplicaChecker(config, registry, interval_s=0.2).run()
                    ),
                ]
                try:
                    server.add_pod("sglang-0", LABELS, POD_IPS[0])
                    server.add_pod("sglang-1", LABELS, POD_IPS[1], ready=False)
                    server.add_pod("other-0", {"app.kubernetes.io/name": "vllm"}, "127.0.0.4")
                    joined = await until(
                        lambda: (
                            table_states(registry) == {"us-sglang-sglang-0": ReplicaState.READY}
                        ),
                        "the ready pod in the routing table",
                    )
                    server.set_ready("sglang-1", True)
                    both = {
                        "us-sglang-sglang-0": ReplicaState.READY,
                        "us-sglang-sglang-1": ReplicaState.READY,
                    }
                    await until(lambda: table_states(registry) == both, "the second pod joining")
                    replica = ray.get(registry.snapshot.remote(), timeout=10).replica(
                        "us-sglang-sglang-1"
                    )
                    assert replica.url == f"http://{POD_IPS[1]}:{port}"
                    assert (replica.site, replica.generation) == ("us", Generation.MI355X)

                    server.set_ready("sglang-0", False)
                    left = await until(
                        lambda: "us-sglang-sglang-0" not in table_states(registry),
                        "the unready pod leaving",
                    )
                    server.delete_pod("sglang-1")
                    await until(lambda: table_states(registry) == {}, "the deleted pod leaving")

                    # The registry loses a replica (as after a restart): the resync restores it.
                    server.set_ready("sglang-0", True)
                    await until(lambda: "us-sglang-sglang-0" in table_states(registry), "rejoin")
                    ray.get(registry.deregister_replica.remote("us-sglang-sglang-0"), timeout=10)
                    await until(
                        lambda: "us-sglang-sglang-0" in table_states(registry), "the resync"
                    )
                    assert len(server.lists()) == 1, "pods are followed by a watch, not polled"
                    print(f"\njoin {joined:.2f} s, leave {left:.2f} s after the pod event")
                finally:
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                    ray.kill(registry, no_restart=True)

    asyncio.run(scenario())


def test_a_config_without_selector_pools_starts_no_watch() -> None:
    config = parse_config(
        """
apiVersion: orchestrator/v1alpha1
kind: Orchestrator
sites: {us: {}}
pools: [{name: a, site: us, generation: MI300X, engine: external, endpoints: ["http://h:1"]}]
"""
    )

    def no_api() -> Any:
        raise AssertionError("no Kubernetes API is needed without a selector pool")

    asyncio.run(asyncio.wait_for(KubernetesPools(config, None, api_factory=no_api).run(), 5))


@pytest.mark.parametrize(
    ("pool", "message"),
    [
        pytest.param(
            '{name: a, site: us, generation: MI300X, engine: external, endpoints: ["http://h:1"],'
            " port: 8000}",
            "pools[0].port: port is the serving port of pods found through selector",
            id="port-with-endpoints",
        ),
        pytest.param(
            "{name: a, site: us, generation: MI300X, engine: vllm, replicas: 1, port: 8000}",
            "pools[0].port: only external pools have port",
            id="port-on-a-launched-pool",
        ),
    ],
)
def test_a_pool_port_belongs_to_selector_pools_only(pool: str, message: str) -> None:
    from orchestrator.config import ConfigError

    text = "\n".join(
        [
            "apiVersion: orchestrator/v1alpha1",
            "kind: Orchestrator",
            "sites: {us: {}}",
            f"pools: [{pool}]",
        ]
    )
    with pytest.raises(ConfigError) as raised:
        parse_config(text)
    assert message in str(raised.value)
