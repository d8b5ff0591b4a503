"""The engines' Prometheus HTTP service discovery, served by a real control plane on a real Ray
cluster: it lists every registered replica with the static targets' labels (`node`: the Ray
node's `k8s-node` label, the name its exporter uses); a replica added by a scale appears in it,
and a real Prometheus reading it scrapes the new replica without a restart. Over the control
plane's mutual TLS, only a caller with a client certificate gets the list.

One small cluster serves the module: a single kr/MI300X node, one simulated pool of size 1.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
import ray
from ray.cluster_utils import Cluster
from ray_cluster import start_cluster
from test_controlplane_end_to_end import LoopThread

from orchestrator.config import ConfigError, default_config, default_config_text, parse_config
from orchestrator.config.schema import OrchestratorConfig
from orchestrator.controlplane.admin_client import ControlPlaneClient
from orchestrator.controlplane.control_plane import ControlPlane
from orchestrator.controlplane.http_sd import EngineDiscovery, HttpSdServer
from orchestrator.controlplane.placement import K8S_NODE_LABEL, NodeGroup
from orchestrator.controlplane.sd_targets import address_of
from orchestrator.core.generations import Generation
from orchestrator.core.records import Replica, ReplicaState
from orchestrator.monitoring.local_prometheus import LocalPrometheus, prometheus_available
from orchestrator.monitoring.scrape_config import DiscoveredJob

sys.path.insert(0, str(Path(__file__).parents[1] / "security"))
from pki import make_pki  # the TLS tests' throwaway PKI

pytestmark = pytest.mark.slow

NAMESPACE = "orchestrator-sd-test"
POOL = "kr-mi300x"
K8S_NODE = "gpu-node-7"
T = TypeVar("T")


def config() -> OrchestratorConfig:
    """Only the kr/MI300X pool, one replica, room on its node for a second one."""
    base = default_config()
    pool = base.pool(POOL).model_copy(update={"replicas": 1, "time_scale": 10.0})
    return base.model_copy(update={"pools": (pool,)})


@dataclass
class World:
    control_plane: ControlPlane
    servers: LoopThread
    grpc_target: str
    sd_url: str

    def ready(self) -> list[Replica]:
        table = ray.get(self.control_plane.registry.snapshot.remote(), timeout=10)
        return [r for r in table.replicas if r.state is ReplicaState.READY]


def eventually(check: Callable[[], T | None], timeout_s: float, what: str) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.1)


def ready_replicas(world: World, count: int) -> list[Replica] | None:
    ready = world.ready()
    return ready if len(ready) == count else None


def get_json(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    wanted = config()
    group = NodeGroup("kr", Generation.MI300X, gpu_slots=2)  # room for the scale to 2
    cluster: Cluster
    # One Ray node (the head) carries the pool's site label and GPU slots: the cheapest cluster.
    # Its `k8s-node` label is what the chart gives a worker pod: its Kubernetes node's name.
    node_args = group.ray_node_args()
    node_args["labels"] = {**node_args["labels"], K8S_NODE_LABEL: K8S_NODE}
    cluster, _ = start_cluster(
        {"num_cpus": 1, "include_dashboard": False, **node_args}, lambda _: {}
    )
    servers = LoopThread()
    control_plane = ControlPlane(
        wanted, namespace=NAMESPACE, port=0, sd_port=0, reconcile_interval_s=0.3
    )
    try:
        cluster.connect(namespace=NAMESPACE)
        port = servers.run(control_plane.start())
        assert control_plane.sd_url is not None
        world = World(control_plane, servers, f"127.0.0.1:{port}", control_plane.sd_url)
        eventually(world.ready, 60, "the pool's first replica ready")
        yield world
    finally:
        servers.run(control_plane.stop(remove_registry=True))
        servers.close()
        ray.shutdown()
        cluster.shutdown()


def test_the_sd_endpoint_lists_each_replica_with_the_static_targets_labels(world: World) -> None:
    status, groups = get_json(world.sd_url)
    assert status == 200
    (replica,) = world.ready()
    assert groups == [
        {
            "targets": [address_of(replica.url)],
            "labels": {
                "site": "kr",
                "generation": "MI300X",
                "pool": POOL,
                "replica": replica.replica_id,
                "node": K8S_NODE,  # as the node's exporter names it, not the Ray node id
            },
        }
    ]

    status, error = get_json(world.sd_url.replace("/sd/engines", "/sd/nothing"))
    assert status == 404
    assert "/sd/engines" in error["error"]["message"]


@pytest.mark.skipif(not prometheus_available(), reason="/usr/bin/prometheus is not installed")
def test_after_a_scale_the_new_replica_is_listed_and_prometheus_scrapes_it_unrestarted(
    world: World,
) -> None:
    job = DiscoveredJob("engine", world.sd_url, refresh_s=0.5)
    with LocalPrometheus([], discovered=[job], scrape_interval_s=0.5) as prometheus:

        def engine_targets(count: int) -> list[dict[str, Any]] | None:
            targets = [t for t in prometheus.targets() if t["labels"]["job"] == "engine"]
            healthy = len(targets) == count and all(t["health"] == "up" for t in targets)
            return targets if healthy else None

        first = eventually(lambda: engine_targets(1), 20, "the first replica scraped")
        scaled_at = time.monotonic()
        ControlPlaneClient(world.grpc_target).scale(POOL, 2)  # as `orchestrator scale` does
        replicas = eventually(lambda: ready_replicas(world, 2), 60, "both replicas ready")
        ready_s = time.monotonic() - scaled_at
        _, groups = get_json(world.sd_url)
        assert sorted(g["labels"]["replica"] for g in groups) == sorted(
            r.replica_id for r in replicas
        )
        targets = eventually(lambda: engine_targets(2), 20, "the new replica scraped")
        print(
            f"scale 1 -> 2: new replica ready {ready_s:.1f} s, scraped by Prometheus "
            f"{time.monotonic() - scaled_at:.1f} s after the Scale call (SD refresh 0.5 s)"
        )
        by_replica = {t["labels"]["replica"]: t for t in targets}
        for replica in replicas:
            target = by_replica[replica.replica_id]
            assert target["labels"]["instance"] == address_of(replica.url)
            assert target["labels"]["pool"] == POOL
            assert target["labels"]["node"] == K8S_NODE
        assert first[0]["labels"]["replica"] in by_replica
        # The engines' own series carry the target labels, as the dashboards group them.
        query = 'count by (replica, site, generation) (vllm:num_requests_running{job="engine"})'

        def series() -> list[dict[str, Any]] | None:
            found = prometheus.query(query)
            return found if len(found) == 2 else None

        found = eventually(series, 10, "engine series from both replicas")
        assert {s["metric"]["replica"] for s in found} == set(by_replica)
        assert {(s["metric"]["site"], s["metric"]["generation"]) for s in found} == {
            ("kr", "MI300X")
        }


def test_over_the_control_planes_mutual_tls_only_a_client_certificate_gets_the_list(
    world: World, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path)
    server = HttpSdServer(
        EngineDiscovery(world.control_plane.registry), tls=pki.server_files(mutual=True)
    )
    port = world.servers.run(server.start("127.0.0.1", 0))
    url = f"https://127.0.0.1:{port}/sd/engines"

    async def fetch(client: ssl.SSLContext) -> Any:
        async with aiohttp.ClientSession() as session, session.get(url, ssl=client) as response:
            response.raise_for_status()
            return await response.json()

    def context(with_certificate: bool) -> ssl.SSLContext:
        client = ssl.create_default_context(cafile=str(pki.ca.ca))
        if with_certificate:
            client.load_cert_chain(str(pki.client.cert), str(pki.client.key))
        return client

    try:
        groups = asyncio.run(fetch(context(with_certificate=True)))
        assert {g["labels"]["replica"] for g in groups} == {r.replica_id for r in world.ready()}
        with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
            asyncio.run(fetch(context(with_certificate=False)))
    finally:
        world.servers.run(server.stop())


def test_the_sd_port_is_checked_like_every_other_port() -> None:
    text = default_config_text().replace(
        "  grpcPort: 50052\n", "  grpcPort: 50052\n  httpSdPort: 50052\n"
    )
    assert "httpSdPort" in text
    with pytest.raises(ConfigError, match=r"controlPlane\.httpSdPort: port 50052 is also"):
        parse_config(text)
    good = parse_config(text.replace("httpSdPort: 50052", "httpSdPort: 50053"))
    assert good.control_plane.http_sd_port == 50053
    assert default_config().control_plane.http_sd_port is None  # served only when asked for
