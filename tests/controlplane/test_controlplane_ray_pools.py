"""Pools on a real multi-node Ray cluster: placed by site and generation, kept at size, rebuilt.

The tests share one `ray.cluster_utils.Cluster` on this machine and run in the order written, each
waiting first for the sizes it needs. The cluster: a head node (control plane, no GPUs), a
kr/MI300X node, a us/MI355X node, and two decoys — a us node of the wrong generation (MI300X) and
a kr node of the wrong site for the MI355X pool (MI355X). GPUs are modelled as a `gpu_slot`
resource; the accelerator type is the resource Ray puts on real GPU nodes.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.cluster_utils import Cluster
from ray_cluster import start_cluster

from orchestrator.config import default_config
from orchestrator.controlplane.placement import GPU_SLOT_RESOURCE, SITE_LABEL
from orchestrator.controlplane.reconciler import PoolReconciler
from orchestrator.controlplane.registry import start_registry
from orchestrator.core.records import ReplicaState
from orchestrator.table.snapshot import RoutingTable

pytestmark = pytest.mark.slow

MI300X = "AMD-Instinct-MI300X-OAM"
MI355X = "AMD-Instinct-MI355X-OAM"
NAMESPACE = "orchestrator-test"
# Node death is noticed by Ray's health checks; tightened so a killed node is dead within ~2 s.
FAST_FAILURE_DETECTION = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 3,
}

# A replica silent this long on a live node counts as lost and is replaced (3 missed heartbeats).
LOST_AFTER_S = 3.0


def gpu_node(site: str, accelerator: str, slots: int = 4) -> dict[str, Any]:
    return {
        "num_cpus": 1,
        "num_gpus": 0,
        "labels": {SITE_LABEL: site},
        "resources": {f"accelerator_type:{accelerator}": 1, GPU_SLOT_RESOURCE: slots},
    }


@dataclass
class World:
    cluster: Cluster
    nodes: dict[str, Any]
    registry: Any
    reconciler: PoolReconciler
    stop: threading.Event = field(default_factory=threading.Event)

    def table(self) -> RoutingTable:
        table: RoutingTable = ray.get(self.registry.snapshot.remote(), timeout=10)
        return table

    def ready(self, pool: str) -> list[Any]:
        return [
            r for r in self.table().replicas if r.pool == pool and r.state is ReplicaState.READY
        ]

    def desired(self, pool: str) -> int | None:
        status = ray.get(self.registry.status.remote(), timeout=10)
        sizes: dict[str, int | None] = {p.name: p.replicas for p in status.pools}
        return sizes[pool]

    def node_name(self, node_id: str) -> str:
        return next(name for name, node in self.nodes.items() if node.node_id == node_id)


def eventually(check: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Seconds until `check()` held; fails naming `what` after `timeout_s`."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout_s:
            pytest.fail(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.1)
    return time.monotonic() - start


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention `text` (a Ray session directory)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = next(
                line for line in (proc / "status").read_text().splitlines() if line[:6] == "State:"
            )
        except (OSError, StopIteration):
            continue
        if text in cmdline and "zombie" not in state:
            found.append(cmdline)
    return found


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    cluster, nodes = start_cluster(
        {"num_cpus": 1, "include_dashboard": False, "_system_config": FAST_FAILURE_DETECTION},
        lambda cluster: {
            "kr-mi300x": cluster.add_node(**gpu_node("kr", MI300X)),
            "us-mi355x": cluster.add_node(**gpu_node("us", MI355X)),
            "us-mi300x (wrong generation)": cluster.add_node(**gpu_node("us", MI300X)),
            "kr-mi355x (wrong site)": cluster.add_node(**gpu_node("kr", MI355X)),
        },
    )
    session = cluster.head_node.get_session_dir_path()
    reconciler_thread: threading.Thread | None = None
    world: World | None = None
    try:
        cluster.connect(namespace=NAMESPACE)
        config = default_config()
        registry = start_registry(config, namespace=NAMESPACE)
        reconciler = PoolReconciler(
            registry, model=config.model, namespace=NAMESPACE, lost_after_s=LOST_AFTER_S
        )
        world = World(cluster, nodes, registry, reconciler)
        reconciler_thread = threading.Thread(
            target=reconciler.run, args=(world.stop, 0.5), daemon=True
        )
        reconciler_thread.start()
        yield world
    finally:
        if world is not None:
            world.stop.set()
            if reconciler_thread is not None:
                reconciler_thread.join(timeout=15)
            world.reconciler.shutdown()
            ray.kill(world.registry, no_restart=True)
        ray.shutdown()
        cluster.shutdown()
    eventually(lambda: not processes_mentioning(session), 15, "no Ray process left running")


def test_pools_come_up_to_size_on_matching_nodes_only_and_their_endpoints_answer(
    world: World,
) -> None:
    eventually(
        lambda: len(world.ready("kr-mi300x")) == 2 and len(world.ready("us-mi355x")) == 2,
        45,
        "both pools at 2 ready replicas",
    )
    for pool, home in (("kr-mi300x", "kr-mi300x"), ("us-mi355x", "us-mi355x")):
        replicas = world.ready(pool)
        assert {world.node_name(r.node) for r in replicas} == {home}
        for replica in replicas:
            with urllib.request.urlopen(replica.url + "/v1/models", timeout=5) as response:
                models = json.load(response)
            assert [m["id"] for m in models["data"]] == [default_config().model]


def test_a_replica_whose_actor_dies_on_a_live_node_is_replaced(world: World) -> None:
    eventually(lambda: len(world.ready("kr-mi300x")) == 2, 45, "kr-mi300x at 2 ready replicas")
    victim = world.ready("kr-mi300x")[0]
    ray.kill(ray.get_actor(f"replica-{victim.replica_id}", namespace=NAMESPACE))
    eventually(
        lambda: victim.replica_id not in {r.replica_id for r in world.ready("kr-mi300x")},
        LOST_AFTER_S + 3,
        "the dead replica out of the ready set",
    )
    eventually(lambda: len(world.ready("kr-mi300x")) == 2, 30, "kr-mi300x back at 2 replicas")
    assert victim.replica_id not in {r.replica_id for r in world.table().replicas}


def test_a_killed_registry_comes_back_and_is_rebuilt_from_re_registration(world: World) -> None:
    ray.get(world.registry.scale.remote("kr-mi300x", 3), timeout=10)
    eventually(
        lambda: len(world.ready("kr-mi300x")) == 3 and len(world.ready("us-mi355x")) == 2,
        45,
        "kr-mi300x at 3 and us-mi355x at 2 ready replicas",
    )
    before = world.table()
    ray.kill(world.registry, no_restart=False)
    eventually(
        lambda: (
            {(r.replica_id, r.url) for r in world.ready("kr-mi300x") + world.ready("us-mi355x")}
            == {(r.replica_id, r.url) for r in before.replicas}
        ),
        15,
        "the restarted registry listing the same replicas",
    )
    after = world.table()
    assert after.version > before.version
    assert world.desired("kr-mi300x") == 3  # the size set before the restart survives it
    time.sleep(2)  # a few reconcile passes: nothing extra was started while it was rebuilt
    assert {r.replica_id for r in world.table().replicas} == {r.replica_id for r in before.replicas}


def test_scaling_to_4_places_new_replicas_only_on_matching_nodes(world: World) -> None:
    eventually(lambda: len(world.ready("us-mi355x")) == 2, 45, "us-mi355x at 2 ready replicas")
    ray.get(world.registry.scale.remote("us-mi355x", 4), timeout=10)
    eventually(lambda: len(world.ready("us-mi355x")) == 4, 30, "us-mi355x at 4 ready replicas")
    assert {world.node_name(r.node) for r in world.ready("us-mi355x")} == {"us-mi355x"}


def test_a_drained_pool_leaves_the_table_its_actors_stop_and_nothing_replaces_them(
    world: World,
) -> None:
    eventually(lambda: len(world.ready("us-mi355x")) >= 2, 45, "us-mi355x at 2 ready replicas")
    serving = {r.replica_id for r in world.ready("us-mi355x")}
    elsewhere = {r.replica_id for r in world.ready("kr-mi300x")}
    drained = set(ray.get(world.registry.drain.remote("us-mi355x"), timeout=10))
    assert drained == serving
    states = {r.state for r in world.table().replicas if r.pool == "us-mi355x"}
    assert states == {ReplicaState.DRAINING}
    eventually(
        lambda: not [r for r in world.table().replicas if r.pool == "us-mi355x"],
        15,
        "the drained replicas gone from the table",
    )
    eventually(
        lambda: not drained & {a["name"].removeprefix("replica-") for a in named_actors()},
        15,
        "the drained replicas' actors stopped",
    )
    time.sleep(2)  # a few reconcile passes
    assert world.desired("us-mi355x") == 0
    assert not [r for r in world.table().replicas if r.pool == "us-mi355x"]
    assert {r.replica_id for r in world.ready("kr-mi300x")} == elsewhere


def named_actors() -> list[dict[str, str]]:
    actors: list[dict[str, str]] = ray.util.list_named_actors(all_namespaces=True)
    return actors
