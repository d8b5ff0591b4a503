"""Real engines get GPUs of their own: on a real Ray cluster whose node declares 4 (fake) GPUs,
the pool reconciler places two 2-GPU vLLM replicas on that one node, and each replica's engine
would start with a disjoint pair of the GPU ids Ray assigned it (HIP_VISIBLE_DEVICES and
CUDA_VISIBLE_DEVICES agreeing, no ROCR_VISIBLE_DEVICES to renumber them). A simulated replica on
the same, now full, node still starts: it holds no GPU.

vLLM itself is not launched (it is not installed here, and would need the GPUs): the replica
actors say the command and environment they start it with (`launch_plan`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import ray
from ray.cluster_utils import Cluster
from ray_cluster import start_cluster

from orchestrator.config import default_config
from orchestrator.config.schema import OrchestratorConfig
from orchestrator.controlplane.placement import (
    ACCELERATOR_RESOURCE_PREFIX,
    GPU_SLOT_RESOURCE,
    SITE_LABEL,
    NodeGroup,
    node_infos,
    replica_options,
)
from orchestrator.controlplane.reconcile import NodeInfo, StartReplica
from orchestrator.controlplane.reconciler import PoolReconciler
from orchestrator.controlplane.registry import start_registry
from orchestrator.controlplane.registry_records import ReplicaRegistration
from orchestrator.controlplane.replica_actor import ReplicaActorClass
from orchestrator.controlplane.replica_engine import EngineSpec, LaunchPlan, child_environment
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind
from orchestrator.engines import LaunchCommand

pytestmark = pytest.mark.slow

NAMESPACE = "orchestrator-gpu-test"
POOL = "kr-vllm"
MI300X = "AMD-Instinct-MI300X-OAM"
CALL_S = 30


def config() -> OrchestratorConfig:
    """One vLLM pool of two 2-GPU replicas in kr, on MI300X."""
    base = default_config()
    pool = base.pool("kr-mi300x").model_copy(
        update={
            "name": POOL,
            "engine": EngineKind.VLLM,
            "replicas": 2,
            "gpus_per_replica": 2,
            "time_scale": None,
        }
    )
    return base.model_copy(update={"pools": (pool,)})


@dataclass
class World:
    cluster: Cluster
    gpu_node: str
    registry: Any
    reconciler: PoolReconciler


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    # One Ray node (the head), the cheapest cluster, declaring 4 GPUs as the chart's workers do:
    # the GPU resource and as many gpu_slots.
    cluster, _ = start_cluster(
        {
            "num_cpus": 1,
            "num_gpus": 4,
            "include_dashboard": False,
            "labels": {SITE_LABEL: "kr"},
            "resources": {f"{ACCELERATOR_RESOURCE_PREFIX}{MI300X}": 1, GPU_SLOT_RESOURCE: 4},
        },
        lambda _: {},
    )
    registry: Any = None
    reconciler: PoolReconciler | None = None
    try:
        cluster.connect(namespace=NAMESPACE)
        wanted = config()
        registry = start_registry(wanted, namespace=NAMESPACE)
        reconciler = PoolReconciler(registry, model=wanted.model, namespace=NAMESPACE)
        yield World(cluster, cluster.head_node.node_id, registry, reconciler)
    finally:
        if reconciler is not None:
            reconciler.shutdown()
        if registry is not None:
            ray.kill(registry, no_restart=True)
        ray.shutdown()
        cluster.shutdown()


def replica_actors() -> list[Any]:
    names = [
        entry["name"]
        for entry in ray.util.list_named_actors(all_namespaces=True)
        if entry["namespace"] == NAMESPACE and entry["name"].startswith(f"replica-{POOL}-")
    ]
    return [ray.get_actor(name, namespace=NAMESPACE) for name in names]


def test_two_vllm_replicas_on_one_node_start_on_disjoint_gpus_ray_assigned(world: World) -> None:
    actions = world.reconciler.step()
    assert actions == [StartReplica(POOL, world.gpu_node)] * 2
    actors = replica_actors()
    assert len(actors) == 2
    plans: list[LaunchPlan] = ray.get([a.launch_plan.remote(8000) for a in actors], timeout=CALL_S)
    assigned = ray.get([a.gpu_ids.remote() for a in actors], timeout=CALL_S)

    devices = [plan.environment["HIP_VISIBLE_DEVICES"] for plan in plans]
    gpus = [set(d.split(",")) for d in devices]
    assert all(len(g) == 2 for g in gpus), devices
    assert gpus[0].isdisjoint(gpus[1]), devices
    assert gpus[0] | gpus[1] == {"0", "1", "2", "3"}
    assert [",".join(map(str, ids)) for ids in assigned] == devices  # Ray's ids, as Ray gave them
    for plan, device_list in zip(plans, devices, strict=True):
        assert plan.argv[:2] == ("vllm", "serve")
        assert plan.argv[plan.argv.index("--tensor-parallel-size") + 1] == "2"
        assert plan.environment["CUDA_VISIBLE_DEVICES"] == device_list
        assert "ROCR_VISIBLE_DEVICES" not in plan.environment


def test_a_simulated_replica_holds_no_gpu_and_fits_on_a_node_whose_gpus_are_taken(
    world: World,
) -> None:
    assert len(replica_actors()) == 2  # the vLLM replicas hold all 4 GPUs
    pool = (
        config()
        .pool(POOL)
        .model_copy(update={"name": "kr-sim", "engine": EngineKind.SIM, "gpus_per_replica": 1})
    )
    registration = ReplicaRegistration(
        replica_id="kr-sim-1", url="", pool="kr-sim", site="kr",
        generation=Generation.MI300X, engine=EngineKind.SIM, node=world.gpu_node,
    )  # fmt: skip
    engine = EngineSpec(EngineKind.SIM, "openai/gpt-oss-120b", Generation.MI300X, "", 0.0)
    options = replica_options(pool, world.gpu_node, name="replica-kr-sim-1", namespace=NAMESPACE)
    actor = ReplicaActorClass.options(**options).remote(registration, engine, world.registry)
    try:
        assert ray.get(actor.gpu_ids.remote(), timeout=CALL_S) == ()
        assert ray.get(actor.launch_plan.remote(8000), timeout=CALL_S) is None
    finally:
        ray.kill(actor)


def test_the_engine_environment_drops_rocr_and_keeps_the_rest() -> None:
    inherited = {"PATH": "/usr/bin", "ROCR_VISIBLE_DEVICES": "0,1,2,3", "HIP_VISIBLE_DEVICES": "7"}
    command = LaunchCommand(("vllm", "serve"), {"HIP_VISIBLE_DEVICES": "2,3", "X": "1"})
    assert child_environment(inherited, command) == {
        "PATH": "/usr/bin",
        "HIP_VISIBLE_DEVICES": "2,3",
        "CUDA_VISIBLE_DEVICES": "2,3",
        "X": "1",
    }
    # An engine that names no GPUs (the simulator's command) gets the environment unchanged.
    plain = LaunchCommand(("python",), {})
    assert child_environment(inherited, plain) == inherited


def test_real_engines_count_only_gpus_ray_can_give_simulated_ones_count_slots_too() -> None:
    slots: dict[str, float] = NodeGroup("kr", Generation.MI300X, 4).ray_node_args()["resources"]
    labels = {SITE_LABEL: "kr"}
    # A node of `orchestrator up` (GPU slots, no GPUs), and one of the chart (both, equal).
    embedded = {"NodeID": "sim-node", "Alive": True, "Labels": labels, "Resources": slots}
    chart = {**embedded, "NodeID": "gpu-node", "Resources": {**slots, "GPU": 4.0}}
    taken = {"gpu-node": 3}
    assert node_infos([embedded, chart], taken) == [
        NodeInfo("sim-node", "kr", MI300X, gpus_free=4),
        NodeInfo("gpu-node", "kr", MI300X, gpus_free=1),
    ]
    assert node_infos([embedded, chart], taken, real_gpus_only=True) == [
        NodeInfo("sim-node", "kr", MI300X, gpus_free=0),
        NodeInfo("gpu-node", "kr", MI300X, gpus_free=1),
    ]
