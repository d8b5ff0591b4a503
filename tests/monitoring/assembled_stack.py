"""The embedded stack's scrape targets, assembled in the test process: real simulated replicas
(in threads), the real router (`orchestrator router`, a child process) and real node exporters
over the driver fixture trees, each labelled as `orchestrator up` labels them."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from replica_server import replica

from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, Replica
from orchestrator.exporters.server import start_exporter
from orchestrator.monitoring.scrape_config import ScrapeTarget
from orchestrator.monitoring.targets import ExporterEndpoint, stack_targets
from orchestrator.sim.replica import ReplicaSettings

sys.path.insert(0, str(Path(__file__).parents[1] / "live"))
from live_fleet import free_port, started

FIXTURES = Path(__file__).parents[1] / "exporters" / "fixtures"
MODEL = "openai/gpt-oss-120b"
TIME_SCALE = 10.0


@dataclass(frozen=True, slots=True)
class StackNode:
    """One simulated node: its site, GPU generation and the NIC driver of its fixture tree."""

    site: str
    generation: Generation
    driver: str

    @property
    def name(self) -> str:
        return f"{self.site}-{self.generation.value.lower()}-0"

    @property
    def pool(self) -> str:
        return f"{self.site}-{self.generation.value.lower()}"


NODES = (
    StackNode("kr", Generation.MI300X, "mlx5"),
    StackNode("us", Generation.MI355X, "ionic"),
    StackNode("us", Generation.MI355X, "bnxt_re"),
)


@dataclass(frozen=True, slots=True)
class AssembledStack:
    router_url: str
    replicas: list[Replica]
    targets: list[ScrapeTarget]


@contextlib.contextmanager
def assembled_stack(workdir: Path) -> Iterator[AssembledStack]:
    """One replica and one exporter per node of `NODES`, and a router over the replicas."""
    with contextlib.ExitStack() as stack:
        replicas, exporters = [], []
        for index, node in enumerate(NODES):
            server = stack.enter_context(
                replica(ReplicaSettings(node.generation, time_scale=TIME_SCALE, seed=index))
            )
            replicas.append(
                Replica(
                    replica_id=f"{node.pool}-{index}",
                    url=server.url,
                    model=MODEL,
                    pool=node.pool,
                    site=node.site,
                    generation=node.generation,
                    engine=EngineKind.SIM,
                    capacity_prior_tokens_per_s=100.0,
                    node=f"{node.site}-{index}",
                )
            )
            fixture = FIXTURES / node.driver
            handle = start_exporter(
                fixture / "sys",
                node=f"{node.site}-{index}",
                site=node.site,
                ethtool_dir=fixture / "ethtool",
            )
            stack.callback(handle.stop)
            exporters.append(
                ExporterEndpoint(
                    node=f"{node.site}-{index}",
                    site=node.site,
                    generation=node.generation.value,
                    address=f"{handle.host}:{handle.port}",
                )
            )
        table = workdir / "replicas.yaml"
        table.write_text(
            "apiVersion: orchestrator/v1alpha1\nkind: Replicas\n"
            f"model: {MODEL}\nreplicas:\n"
            + "".join(
                f"  - {{id: {r.replica_id}, url: '{r.url}', pool: {r.pool}, site: {r.site}, "
                f"node: {r.node}, generation: {r.generation.value}, engine: sim, "
                f"timeScale: {TIME_SCALE}}}\n"
                for r in replicas
            )
        )
        port, metrics_port = free_port(), free_port()
        router_url = f"http://127.0.0.1:{port}"
        argv = [
            sys.executable, "-m", "orchestrator", "--log-level", "WARNING", "router",
            "--config", str(table), "--port", str(port), "--grpc-port", "0",
            "--metrics-port", str(metrics_port), "--latency-scale", str(TIME_SCALE),
        ]  # fmt: skip
        stack.enter_context(started(argv, workdir / "router.log", f"{router_url}/ready"))
        targets = stack_targets(  # Prometheus scrapes the router's metrics port
            routers=[f"127.0.0.1:{metrics_port}"], replicas=replicas, exporters=exporters
        )
        yield AssembledStack(router_url, replicas, targets)
