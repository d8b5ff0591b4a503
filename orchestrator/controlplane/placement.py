"""What placement reads from Ray and asks of it: node facts in, actor options out.

A node offers a pool's GPUs through three facts Ray already has: its `site` label, its accelerator
type (the `accelerator_type:<name>` resource Ray adds on GPU nodes, `AMD-Instinct-MI355X-OAM`), and
a count of GPU slots. Slots are the `GPU` resource on real GPU nodes, or a custom `gpu_slot`
resource where a node models GPUs it does not have (the embedded mode and the tests). A replica
asks for exactly those three, plus the node `reconcile` chose, so Ray refuses any other node.

A replica of a real engine (vLLM, SGLang) asks for Ray's `GPU` resource, so Ray hands each replica
GPU ids of its own and the actor pins its engine to them (`replica_actor.py`); a simulated one asks
for `gpu_slot`s only and holds no GPU, so `orchestrator up` runs on a machine without any.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from orchestrator.config.schema import OrchestratorConfig, PoolSpec
from orchestrator.controlplane.reconcile import NodeInfo
from orchestrator.core.generations import Generation, spec_of
from orchestrator.core.records import EngineKind

SITE_LABEL: Final = "site"
# The Kubernetes node a Ray worker pod runs on (the chart sets it from `spec.nodeName`): how a
# node health report, which knows only that name, finds the replicas on it (grpc_service.py).
K8S_NODE_LABEL: Final = "k8s-node"
GPU_SLOT_RESOURCE: Final = "gpu_slot"
ACCELERATOR_RESOURCE_PREFIX: Final = "accelerator_type:"
GPU_ENGINES: Final = frozenset({EngineKind.VLLM, EngineKind.SGLANG})


def runs_on_gpus(engine: EngineKind) -> bool:
    """Whether replicas of `engine` need GPUs of their own (the simulator needs none)."""
    return engine in GPU_ENGINES


def node_infos(
    ray_nodes: Sequence[Mapping[str, Any]],
    taken: Mapping[str, int],
    *,
    real_gpus_only: bool = False,
) -> list[NodeInfo]:
    """`ray.nodes()` entries as placement sees them; `taken` counts slots held per node id.

    Free slots come from the node's total less what the control plane itself holds there (not
    from Ray's available resources, which lag a just-created actor and would place twice).
    `real_gpus_only` counts only Ray's `GPU` resource: what replicas of a real engine ask for, so
    a node with `gpu_slot`s alone offers them nothing (Ray would never schedule them there).
    """
    infos = []
    for entry in ray_nodes:
        node_id = str(entry["NodeID"])
        resources: Mapping[str, float] = entry.get("Resources") or {}
        labels: Mapping[str, str] = entry.get("Labels") or {}
        types = sorted(
            name.removeprefix(ACCELERATOR_RESOURCE_PREFIX)
            for name in resources
            if name.startswith(ACCELERATOR_RESOURCE_PREFIX)
        )
        gpus = resources.get("GPU", 0)
        slots = int(gpus if real_gpus_only else gpus or resources.get(GPU_SLOT_RESOURCE, 0))
        infos.append(
            NodeInfo(
                node_id=node_id,
                site=labels.get(SITE_LABEL),
                accelerator_type=types[0] if types else None,
                gpus_free=max(slots - taken.get(node_id, 0), 0),
                alive=bool(entry.get("Alive")),
            )
        )
    return infos


def replica_options(
    pool: PoolSpec,
    node_id: str,
    *,
    name: str,
    namespace: str,
    uses_real_gpus: bool | None = None,
) -> dict[str, Any]:
    """`ReplicaActor.options(...)` pinning one replica of `pool` to `node_id`.

    The accelerator type and site label are asked for even though the node is named: should the
    node not match (a label changed), Ray fails the placement instead of running it elsewhere.
    `uses_real_gpus` `None` follows the pool's engine (`runs_on_gpus`); a bool forces either way.
    """
    if uses_real_gpus is None:
        uses_real_gpus = runs_on_gpus(pool.engine)
    gpus: dict[str, Any] = (
        {"num_gpus": pool.gpus_per_replica}
        if uses_real_gpus
        else {"num_gpus": 0, "resources": {GPU_SLOT_RESOURCE: pool.gpus_per_replica}}
    )
    return {
        "name": name,
        "namespace": namespace,
        "num_cpus": 0,
        "max_restarts": 0,
        "accelerator_type": spec_of(pool.generation).ray_accelerator_type,
        "label_selector": {SITE_LABEL: pool.site},
        "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False),
        **gpus,
    }


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """One simulated Ray node of the embedded mode: a site, a generation and its GPU slots."""

    site: str
    generation: Generation
    gpu_slots: int

    def ray_node_args(self) -> dict[str, Any]:
        """Arguments for `ray start` / `Cluster.add_node`: the label and resources placement reads.

        No real GPUs (`num_gpus=0`); the slots are a custom resource, the accelerator type is the
        resource Ray would put on a node with these GPUs.
        """
        accelerator = spec_of(self.generation).ray_accelerator_type
        return {
            "num_gpus": 0,
            "labels": {SITE_LABEL: self.site},
            "resources": {
                f"{ACCELERATOR_RESOURCE_PREFIX}{accelerator}": 1,
                GPU_SLOT_RESOURCE: self.gpu_slots,
            },
        }


def node_groups(config: OrchestratorConfig) -> list[NodeGroup]:
    """One node per (site, generation) of the launched pools, with room for all their replicas.

    A group of pools all sized 0 still gets a node with one slot, so `scale` has somewhere to go.
    """
    slots: dict[tuple[str, Generation], int] = {}
    for pool in config.launched_pools:
        key = (pool.site, pool.generation)
        slots[key] = slots.get(key, 0) + (pool.replicas or 0) * pool.gpus_per_replica
    return [NodeGroup(site, generation, max(n, 1)) for (site, generation), n in slots.items()]
