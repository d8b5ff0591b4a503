"""What placement reads from Ray's node table, and the nodes the embedded mode starts."""

from __future__ import annotations

from typing import Any

from orchestrator.config import default_config
from orchestrator.controlplane.placement import (
    GPU_SLOT_RESOURCE,
    NodeGroup,
    node_groups,
    node_infos,
    replica_options,
)
from orchestrator.controlplane.reconcile import NodeInfo
from orchestrator.core.generations import Generation

NODE_ID = "ab" * 28  # Ray node ids are 28 bytes, in hex


def ray_node(
    node_id: str, node_args: dict[str, Any] | None = None, alive: bool = True
) -> dict[str, Any]:
    """A `ray.nodes()` entry as Ray reports a node started with `node_args`."""
    args = node_args or {}
    return {
        "NodeID": node_id,
        "Alive": alive,
        "Labels": {"ray.io/node-id": node_id, **args.get("labels", {})},
        "Resources": {"CPU": 1.0, **args.get("resources", {})},
    }


def test_each_site_and_generation_of_the_default_config_gets_a_node_with_room_for_it() -> None:
    assert node_groups(default_config()) == [
        NodeGroup("kr", Generation.MI300X, 2),
        NodeGroup("us", Generation.MI355X, 2),
    ]


def test_a_node_started_for_a_group_is_read_back_as_that_site_generation_and_slots() -> None:
    group = NodeGroup("us", Generation.MI355X, 4)
    nodes = [
        ray_node("a", group.ray_node_args()),
        ray_node("head"),
        ray_node("dead", group.ray_node_args(), alive=False),
    ]
    assert node_infos(nodes, {"a": 1}) == [
        NodeInfo("a", "us", "AMD-Instinct-MI355X-OAM", gpus_free=3),
        NodeInfo("head", None, None, gpus_free=0),
        NodeInfo("dead", "us", "AMD-Instinct-MI355X-OAM", gpus_free=4, alive=False),
    ]


def test_a_replica_asks_ray_for_its_node_site_label_accelerator_type_and_gpu_slots() -> None:
    pool = default_config().pool("kr-mi300x")
    options = replica_options(pool, NODE_ID, name="replica-x", namespace="ns", uses_real_gpus=False)
    assert options["accelerator_type"] == "AMD-Instinct-MI300X-OAM"
    assert options["label_selector"] == {"site": "kr"}
    assert options["resources"] == {GPU_SLOT_RESOURCE: 1}
    assert options["num_gpus"] == 0
    assert options["scheduling_strategy"].node_id == NODE_ID
    assert options["scheduling_strategy"].soft is False
    real = replica_options(pool, NODE_ID, name="replica-x", namespace="ns", uses_real_gpus=True)
    assert real["num_gpus"] == 1
    assert "resources" not in real
