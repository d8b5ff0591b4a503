"""The embedded fabric's naming of simulated nodes, and a clear failure when it cannot start."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from orchestrator.config import FabricHealthSpec
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind
from orchestrator.fabric.embedded import (
    EmbeddedFabric,
    FabricStartFailed,
    PlacedReplica,
    node_names,
)


def placed(replica_id: str, ray_node: str, site: str, generation: Generation) -> PlacedReplica:
    return PlacedReplica(replica_id, f"http://{replica_id}", ray_node, site, generation,
                         EngineKind.SIM)  # fmt: skip


def test_nodes_are_named_by_site_and_generation_and_numbered_only_when_shared() -> None:
    names = node_names(
        [
            placed("a", "ray-1", "us", Generation.MI355X),
            placed("b", "ray-1", "us", Generation.MI355X),
            placed("c", "ray-2", "kr", Generation.MI300X),
            placed("d", "ray-4", "kr", Generation.MI355X),
            placed("e", "ray-3", "kr", Generation.MI355X),
        ]
    )
    assert names == {
        "ray-1": "us-mi355x",
        "ray-2": "kr-mi300x",
        "ray-3": "kr-mi355x-0",
        "ray-4": "kr-mi355x-1",
    }


def test_without_a_control_plane_the_fabric_says_so_and_leaves_nothing(tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{closed.getsockname()[1]}"
    fabric = EmbeddedFabric(tmp_path / "fabric", control_plane=nowhere, spec=FabricHealthSpec())

    async def start_then_stop() -> None:
        try:
            await fabric.start()
        finally:
            await fabric.stop()

    with pytest.raises(FabricStartFailed, match="did not list the replicas"):
        asyncio.run(start_then_stop())
    assert not (tmp_path / "fabric").exists()
