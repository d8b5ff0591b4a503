"""The fabric simulator as an exporter sees it: a node tree whose counters follow the traffic its
replicas serve, faults that move the counters a real fault would, atomic writes, the fault file.

Each test reads the tree through the real exporter (`build_exporter`), the way `up` serves it.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from replica_server import replica

from orchestrator.config import FabricHealthSpec
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, NodeHealth
from orchestrator.exporters import names as n
from orchestrator.exporters.exposition import NodeExporter
from orchestrator.exporters.server import build_exporter
from orchestrator.fabric.faults import Fault, active_faults, add_fault, read_faults, remove_faults
from orchestrator.fabric.health import HealthVerdict, NodeHealthEvaluator
from orchestrator.fabric.model import FaultKind, NodeFabricModel, NodeTraffic
from orchestrator.fabric.readings import reading_from_samples
from orchestrator.fabric.traffic import ReplicaEndpoint, TrafficMeter
from orchestrator.fabric.tree import NodeTree
from orchestrator.sim.replica import ReplicaSettings

BUSY = NodeTraffic(generated_tokens=400, prompt_tokens=1600, running=8, kv_cache_usage=(0.5,))


@dataclass
class SimulatedNode:
    model: NodeFabricModel
    tree: NodeTree
    exporter: NodeExporter
    evaluator: NodeHealthEvaluator
    now_s: float = 0.0

    def step(
        self, traffic: NodeTraffic = BUSY, faults: frozenset[FaultKind] = frozenset()
    ) -> HealthVerdict:
        self.model.advance(1.0, traffic, faults)
        self.tree.write(self.model.files())
        self.now_s += 1.0
        reading = reading_from_samples(self.exporter.scrape().samples, self.now_s)
        return self.evaluator.observe(reading)

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's series (matching `labels`) in a scrape now."""
        return sum(
            s.value
            for s in self.exporter.scrape().samples
            if s.metric == name and labels.items() <= s.label_map().items()
        )


@pytest.fixture
def node(tmp_path: Path) -> SimulatedNode:
    model = NodeFabricModel(Generation.MI355X, nics=2, gpus=2, rng=random.Random(3))
    tree = NodeTree(tmp_path / "us-mi355x")
    tree.link_driver(model.devices)
    tree.write(dict(model.static_files()))
    tree.write(model.files())
    exporter = build_exporter(tree.sysfs_root, node="us-mi355x", site="us",
                              ethtool_dir=tree.ethtool_dir)  # fmt: skip
    return SimulatedNode(model, tree, exporter, NodeHealthEvaluator(FabricHealthSpec()))


def test_the_tree_is_an_mlx5_node_the_exporter_reads_without_errors(node: SimulatedNode) -> None:
    scrape = node.exporter.scrape()
    assert scrape.errors_total == {"roce": 0, "hbm": 0, "versions": 0}
    ports = [s for s in scrape.samples if s.metric == n.RDMA_PORT_STATE]
    assert [(s.label_map()["device"], s.label_map()["driver"], s.value) for s in ports] == [
        ("mlx5_0", "mlx5", 4.0), ("mlx5_1", "mlx5", 4.0),
    ]  # fmt: skip
    gpus = [s.label_map() for s in scrape.samples if s.metric == n.GPU_INFO]
    assert {gpu["gpu_generation"] for gpu in gpus} == {"MI355X"}
    assert node.metric(n.GPU_HBM_TOTAL) == pytest.approx(2 * 288e9)


def test_rdma_bytes_follow_the_tokens_served_and_idle_nodes_barely_move(
    node: SimulatedNode,
) -> None:
    def bytes_over(traffic: NodeTraffic, seconds: int) -> float:
        before = node.metric(n.RDMA_PORT_TRANSMIT_BYTES)
        for _ in range(seconds):
            node.step(traffic)
        return node.metric(n.RDMA_PORT_TRANSMIT_BYTES) - before

    idle = bytes_over(NodeTraffic(), 5)
    busy = bytes_over(BUSY, 5)
    twice = bytes_over(NodeTraffic(800, 3200, 8, (0.5,)), 5)
    assert 0 < idle < busy / 50
    assert twice == pytest.approx(2 * busy, rel=0.01)
    assert node.metric(n.RDMA_PORT_RECEIVE_PACKETS) > 0


def test_congestion_noise_is_there_at_baseline_and_the_node_stays_healthy(
    node: SimulatedNode,
) -> None:
    verdicts = [node.step() for _ in range(20)]
    assert all(v.health is NodeHealth.HEALTHY for v in verdicts)
    assert node.metric(n.RDMA_CNP_RECEIVED) > 0
    assert node.metric(n.RDMA_ECN_MARKED_RECEIVED) > 0
    assert 0 < node.metric(n.NIC_PFC_PAUSE_DURATION) < 20 * 0.01 * 4


def test_hbm_use_follows_kv_cache_usage(node: SimulatedNode) -> None:
    node.step(NodeTraffic(kv_cache_usage=(0.1,)))
    low = node.metric(n.GPU_HBM_USED)
    node.step(NodeTraffic(kv_cache_usage=(0.9,)))
    assert node.metric(n.GPU_HBM_USED) > low + 2 * 0.7 * 150e9


# What each fault moves (metric, labels), what it must leave alone, and the verdict it earns.
FAULT_SIGNATURES = {
    FaultKind.LINK_FLAP: (
        [(n.NIC_CARRIER_CHANGES, {}), (n.RDMA_PORT_LINK_DOWNED, {}), (n.NIC_LINK_DOWN_EVENTS, {})],
        [(n.NIC_PFC_PAUSE_DURATION, {})],
        NodeHealth.UNHEALTHY,
    ),
    FaultKind.PFC_STORM: (
        [(n.NIC_PFC_PAUSE_DURATION, {"direction": "rx", "priority": "3"}),
         (n.NIC_PFC_PAUSE_FRAMES, {"direction": "rx"}), (n.NIC_PAUSE_STORM_EVENTS, {})],
        [(n.NIC_CARRIER_CHANGES, {}), (n.RDMA_PORT_LINK_DOWNED, {})],
        NodeHealth.UNHEALTHY,
    ),
    FaultKind.CNP_SURGE: (
        [(n.RDMA_CNP_RECEIVED, {}), (n.RDMA_CNP_SENT, {}), (n.RDMA_ECN_MARKED_RECEIVED, {})],
        [(n.NIC_CARRIER_CHANGES, {}), (n.NIC_PAUSE_STORM_EVENTS, {})],
        NodeHealth.DEGRADED,
    ),
    FaultKind.RETRANSMITS: (
        [(n.RDMA_LOCAL_ACK_TIMEOUTS, {}), (n.RDMA_SEQ_ERROR_NAKS_RECEIVED, {}),
         (n.RDMA_OUT_OF_SEQUENCE, {})],
        [(n.NIC_CARRIER_CHANGES, {}), (n.NIC_PAUSE_STORM_EVENTS, {})],
        NodeHealth.DEGRADED,
    ),
    FaultKind.HBM_PRESSURE: (
        [(n.GPU_HBM_USED, {})],
        [(n.NIC_CARRIER_CHANGES, {}), (n.RDMA_LOCAL_ACK_TIMEOUTS, {})],
        NodeHealth.DEGRADED,
    ),
}  # fmt: skip


@pytest.mark.parametrize("kind", list(FaultKind))
def test_each_fault_moves_its_counters_far_beyond_baseline_and_grades_the_node(
    node: SimulatedNode, kind: FaultKind
) -> None:
    moved, untouched, expected = FAULT_SIGNATURES[kind]
    for _ in range(5):
        node.step()
    quiet = _growth(node, moved + untouched, frozenset())
    faulty = _growth(node, moved + untouched, frozenset({kind}))
    verdict = node.evaluator.observe(
        reading_from_samples(node.exporter.scrape().samples, node.now_s)
    )
    for name, _ in moved:
        factor = 1.5 if name == n.GPU_HBM_USED else 3.0  # a gauge, not a growth
        assert faulty[name] > factor * quiet[name] + 1, (
            f"{kind}: {name} {quiet[name]} → {faulty[name]}"
        )
    for name, _ in untouched:
        assert faulty[name] <= max(3 * quiet[name], 1e-3), name
    assert verdict.health is expected, verdict.reasons


def test_a_flapping_link_shows_down_at_times_and_cuts_traffic_meanwhile(
    node: SimulatedNode,
) -> None:
    states = []
    for _ in range(8):
        node.step(faults=frozenset({FaultKind.LINK_FLAP}))
        states.append(node.metric(n.RDMA_PORT_STATE) / 2)
    assert 1.0 in states and 4.0 in states  # DOWN after a flap, ACTIVE between flaps


def _growth(
    node: SimulatedNode, metrics: list[tuple[str, dict[str, str]]], faults: frozenset[FaultKind]
) -> dict[str, float]:
    """How much each metric grows (a gauge: where it stands) over 5 s of busy traffic."""
    before = {name: node.metric(name, **labels) for name, labels in metrics}
    for _ in range(5):
        node.step(BUSY, faults)
    after = {name: node.metric(name, **labels) for name, labels in metrics}
    return {name: after[name] - (0 if name == n.GPU_HBM_USED else before[name]) for name in after}


def test_a_reader_never_sees_a_half_written_file(tmp_path: Path) -> None:
    tree = NodeTree(tmp_path)
    stop = threading.Event()
    seen: set[str] = set()

    def read() -> None:
        path = tree.sysfs_root / "class/net/x/carrier_changes"
        while not stop.is_set():
            try:
                seen.add(path.read_text())
            except FileNotFoundError:
                continue

    reader = threading.Thread(target=read)
    tree.write({"class/net/x/carrier_changes": "0"})
    reader.start()
    for value in range(1, 300):
        tree.write({"class/net/x/carrier_changes": str(10**12 + value)})
    stop.set()
    reader.join()
    assert seen and all(text.endswith("\n") and text.strip().isdigit() for text in seen)
    assert not list((tree.sysfs_root / "class/net/x").glob(".*")), "temporary files in the tree"


def test_the_traffic_meter_counts_the_tokens_a_real_replica_served() -> None:
    settings = ReplicaSettings(Generation.MI355X, time_scale=0.0, seed=3)
    with replica(settings) as server:
        first, second, gone = asyncio.run(_measure_around_requests(server.url))
    assert first.generated_tokens == 0, "the first look only sets the starting totals"
    assert second.generated_tokens == 15
    assert second.prompt_tokens > 0
    assert gone == NodeTraffic(), "a replica that does not answer adds nothing"


async def _measure_around_requests(url: str) -> tuple[NodeTraffic, NodeTraffic, NodeTraffic]:
    meter = TrafficMeter()
    endpoint = ReplicaEndpoint("r-1", url, EngineKind.SIM)
    body = {"model": "openai/gpt-oss-120b", "prompt": "hello there", "max_tokens": 5}
    async with aiohttp.ClientSession() as session:
        first = await meter.measure(session, [endpoint], time.time())
        for _ in range(3):
            async with session.post(f"{url}/v1/completions", json=body) as response:
                assert response.status == 200
                await response.read()
        second = await meter.measure(session, [endpoint], time.time())
        silent = ReplicaEndpoint("r-2", "http://127.0.0.1:9", EngineKind.SIM)
        gone = await meter.measure(session, [silent], time.time())
    return first, second, gone


def test_faults_are_kept_in_the_fabric_root_with_optional_end_times(tmp_path: Path) -> None:
    now = time.time()
    add_fault(tmp_path, Fault("a", FaultKind.PFC_STORM, now))
    add_fault(tmp_path, Fault("a", FaultKind.LINK_FLAP, now, now + 5))
    add_fault(tmp_path, Fault("b", FaultKind.HBM_PRESSURE, now))
    add_fault(tmp_path, Fault("a", FaultKind.PFC_STORM, now))  # again: replaces, not adds
    assert len(read_faults(tmp_path)) == 3
    assert active_faults(tmp_path, "a", now + 1) == {FaultKind.PFC_STORM, FaultKind.LINK_FLAP}
    assert active_faults(tmp_path, "a", now + 6) == {FaultKind.PFC_STORM}
    removed = remove_faults(tmp_path, node="a")
    assert {f.kind for f in removed} == {FaultKind.PFC_STORM, FaultKind.LINK_FLAP}
    assert active_faults(tmp_path, "b", now) == {FaultKind.HBM_PRESSURE}
    assert [f.kind for f in remove_faults(tmp_path, kind=FaultKind.HBM_PRESSURE)] == [
        FaultKind.HBM_PRESSURE
    ]
    (tmp_path / "faults.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"faults\.json"):
        read_faults(tmp_path)
