"""The embedded stack's fabric: per simulated node a sysfs tree, its exporter and its reporter.

A simulated node is a Ray node of the local cluster (one per site and generation), named
`<site>-<generation>` (`us-mi355x`), with one GPU and one NIC per replica it hosts. Node health
is keyed by the Ray node id because that is the node replicas register with, so a fault on a node
reaches exactly the replicas Ray placed there, as it would on hardware.

Once a second the simulator looks up which replicas run where (`GetStatus`), scrapes their
`/metrics` for tokens served and KV-cache use, reads the fault file, advances each node's counters
and rewrites its tree. Each node's exporter serves the tree; each reporter evaluates the
exporter's scrape and reports to the control plane.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
import grpc

from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2 as pb
from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2_grpc as pb_grpc
from orchestrator.config.fabric_health import FabricHealthSpec
from orchestrator.core.generations import Generation, parse_generation
from orchestrator.core.records import EngineKind
from orchestrator.exporters.server import ExporterHandle, start_exporter
from orchestrator.fabric.faults import active_faults
from orchestrator.fabric.manifest import NodeEntry, StackManifest, write_manifest
from orchestrator.fabric.model import NodeFabricModel, NodeTraffic
from orchestrator.fabric.readings import exporter_reader
from orchestrator.fabric.reporter import HealthReporter
from orchestrator.fabric.traffic import ReplicaEndpoint, TrafficMeter
from orchestrator.fabric.tree import NodeTree

log = logging.getLogger(__name__)

DEFAULT_TICK_S: Final = 1.0
REPORT_INTERVAL_S: Final = 0.5  # reading a simulated tree costs a few ms; react within a second
_CALL_TIMEOUT_S: Final = 5.0
_SCRAPE_TIMEOUT_S: Final = 2.0


class FabricStartFailed(Exception):
    """The fabric could not start: the control plane did not answer, or a port was taken."""


@dataclass(frozen=True, slots=True)
class PlacedReplica:
    """A replica of the routing table as the fabric needs it: where it runs and how to scrape it."""

    replica_id: str
    url: str
    ray_node: str
    site: str
    generation: Generation
    engine: EngineKind


@dataclass(slots=True)
class SimulatedNode:
    """One node: its name, place, counters, tree, exporter and reporter."""

    name: str
    site: str
    generation: Generation
    ray_node: str
    replicas: tuple[str, ...]
    model: NodeFabricModel
    tree: NodeTree
    exporter: ExporterHandle | None = None
    reporter: HealthReporter | None = None
    meter: TrafficMeter = field(default_factory=TrafficMeter)


def node_names(replicas: Sequence[PlacedReplica]) -> dict[str, str]:
    """Ray node id → simulated node name: `<site>-<generation>`, with `-<k>` when a site has
    several nodes of one generation."""
    groups: dict[tuple[str, Generation], list[str]] = {}
    for replica in sorted(replicas, key=lambda r: r.ray_node):
        nodes = groups.setdefault((replica.site, replica.generation), [])
        if replica.ray_node not in nodes:
            nodes.append(replica.ray_node)
    names: dict[str, str] = {}
    for (site, generation), nodes in groups.items():
        base = f"{site}-{generation.value.lower()}"
        for k, ray_node in enumerate(nodes):
            names[ray_node] = base if len(nodes) == 1 else f"{base}-{k}"
    return names


class EmbeddedFabric:
    """Started by `orchestrator up` once its replicas are ready; `stop()` removes everything."""

    def __init__(
        self,
        root: Path,
        *,
        control_plane: str,
        spec: FabricHealthSpec,
        host: str = "127.0.0.1",
        first_port: int = 0,
        tick_s: float = DEFAULT_TICK_S,
        seed: int = 0,
    ) -> None:
        """Exporter `k` (in node-name order) listens on `first_port + k` (free ports if 0)."""
        self.root = root
        self._control_plane = control_plane
        self._spec = spec
        self._host = host
        self._first_port = first_port
        self._tick_s = tick_s
        self._rng = random.Random(seed)
        self.nodes: dict[str, SimulatedNode] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._channel: grpc.aio.Channel | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def exporter_urls(self) -> dict[str, str]:
        """Node name → its exporter's scrape URL."""
        return {n.name: n.exporter.url for n in self.nodes.values() if n.exporter is not None}

    async def start(self) -> None:
        """Build each node's tree from the replicas placed now, serve and report them.

        Raises `FabricStartFailed` saying why; `stop()` then removes what was started.
        """
        try:
            await self._start()
        except grpc.RpcError as error:
            raise FabricStartFailed(
                f"the control plane at {self._control_plane} did not list the replicas: {error}"
            ) from None
        except OSError as error:
            raise FabricStartFailed(str(error)) from None

    async def _start(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)  # a stack that crashed left its faults
        (self.root / "nodes").mkdir(parents=True)
        self._channel = grpc.aio.insecure_channel(self._control_plane)
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=_SCRAPE_TIMEOUT_S)
        )
        placed = await self._placed()
        names = node_names(placed)
        for k, ray_node in enumerate(sorted(names, key=names.__getitem__)):
            hosted = [r for r in placed if r.ray_node == ray_node]
            first = hosted[0]
            node = SimulatedNode(
                name=names[ray_node],
                site=first.site,
                generation=first.generation,
                ray_node=ray_node,
                replicas=tuple(r.replica_id for r in hosted),
                model=NodeFabricModel(
                    first.generation, nics=len(hosted), gpus=len(hosted), rng=self._rng
                ),
                tree=NodeTree(self.root / "nodes" / names[ray_node]),
            )
            node.tree.link_driver(node.model.devices)
            node.tree.write(dict(node.model.static_files()))
            node.tree.write(node.model.files())
            port = self._first_port + k if self._first_port else 0
            try:
                node.exporter = start_exporter(
                    node.tree.sysfs_root, node=node.name, site=node.site, host=self._host,
                    port=port, ethtool_dir=node.tree.ethtool_dir,
                )  # fmt: skip
            except OSError as error:
                raise FabricStartFailed(
                    f"the exporter of node {node.name} cannot listen on {self._host}:{port}"
                    f" ({error.strerror}); exporter k listens on exporters.port + k: choose"
                    " another exporters.port in the config, or 0 for any free ports"
                ) from None
            node.reporter = HealthReporter(
                node_key=ray_node,
                read=exporter_reader(node.exporter),
                control_plane=self._control_plane,
                spec=self._spec,
                interval_s=REPORT_INTERVAL_S,
            )
            self.nodes[node.name] = node
        self._tasks = [asyncio.create_task(self._simulate())] + [
            asyncio.create_task(n.reporter.run()) for n in self.nodes.values() if n.reporter
        ]
        write_manifest(self.root, self.manifest())

    def manifest(self) -> StackManifest:
        return StackManifest(
            pid=os.getpid(),
            control_plane=self._control_plane,
            nodes=tuple(
                NodeEntry(
                    name=n.name,
                    site=n.site,
                    generation=n.generation.value,
                    ray_node=n.ray_node,
                    replicas=n.replicas,
                    exporter_url=n.exporter.url if n.exporter else "",
                    root=str(n.tree.root),
                )
                for n in self.nodes.values()
            ),
        )

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for node in self.nodes.values():
            if node.exporter is not None:
                node.exporter.stop()
        if self._session is not None:
            await self._session.close()
        if self._channel is not None:
            await self._channel.close()
        shutil.rmtree(self.root, ignore_errors=True)

    async def _placed(self) -> list[PlacedReplica]:
        assert self._channel is not None
        stub: Any = pb_grpc.ControlPlaneServiceStub(self._channel)  # type: ignore[no-untyped-call]
        response = await stub.GetStatus(pb.GetStatusRequest(), timeout=_CALL_TIMEOUT_S)
        placed = []
        for entry in response.replicas:
            row = entry.replica
            if entry.HasField("replica") and row.node and row.url:
                placed.append(
                    PlacedReplica(
                        replica_id=row.id,
                        url=row.url,
                        ray_node=row.node,
                        site=row.site,
                        generation=parse_generation(row.generation),
                        engine=EngineKind(row.engine),
                    )
                )
        return placed

    async def _simulate(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(self._tick_s)
            now = time.monotonic()
            try:
                await self.step(now - last)
            except (grpc.RpcError, OSError, ValueError) as error:
                log.warning("fabric step skipped: %s", error)
            except Exception:  # a bug here must not stop the stack; the next step tries again
                log.exception("fabric step failed")
            last = now

    async def step(self, dt_s: float) -> None:
        """Advance every node by `dt_s` of what its replicas served and the faults active now."""
        assert self._session is not None
        placed = await self._placed()
        for node in self.nodes.values():
            endpoints = [
                ReplicaEndpoint(r.replica_id, r.url, r.engine)
                for r in placed
                if r.ray_node == node.ray_node
            ]
            traffic: NodeTraffic = await node.meter.measure(self._session, endpoints, time.time())
            faults = active_faults(self.root, node.name, time.time())
            node.model.advance(dt_s, traffic, faults)
            await asyncio.to_thread(node.tree.write, node.model.files())
