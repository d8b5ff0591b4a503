"""The fabric health reporter (and `orchestrator exporter --control-plane`) against a control
plane serving mutual TLS over a real Registry actor: with our client certificate the node's
health reaches the routing table; refused, it logs once, keeps running and retries, and picks up
a rotated certificate without a restart."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import ray
from pki import Pki

from orchestrator.cli import main
from orchestrator.config import FabricHealthSpec, default_config
from orchestrator.controlplane.grpc_service import start_control_plane_server
from orchestrator.controlplane.registry import start_registry
from orchestrator.controlplane.registry_records import ReplicaRegistration
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, NodeHealth
from orchestrator.exporters.drivers import BNXT_RE
from orchestrator.exporters.tree import NodeTreeBuilder
from orchestrator.fabric.health import NodeReading
from orchestrator.fabric.reporter import HealthReporter
from orchestrator.security.files import TlsFiles

pytestmark = pytest.mark.slow
NAMESPACE = "orchestrator-tls-reporter-test"
REPO = Path(__file__).resolve().parents[2]
BEAT_S = 0.1
REACH_WAIT_S = 10.0
REFUSED_BEATS_S = 0.6  # six beats
CLI_WAIT_S = 30.0  # the command's start-up (imports) on a loaded machine


@pytest.fixture(scope="module")
def registry() -> Iterator[Any]:
    ray.init(address="local", num_cpus=1, include_dashboard=False, namespace=NAMESPACE)
    handle = start_registry(default_config(), namespace=NAMESPACE)
    try:
        yield handle
    finally:
        ray.kill(handle, no_restart=True)
        ray.shutdown()


@contextlib.asynccontextmanager
async def mutual_tls_control_plane(registry: Any, pki: Pki) -> AsyncIterator[str]:
    server, port = await start_control_plane_server(registry, tls=pki.server_files(mutual=True))
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(grace=None)


async def replica_on(registry: Any, node: str) -> str:
    """Register a replica placed on Ray node `node`; its id."""
    replica_id = f"replica-on-{node}"
    registration = ReplicaRegistration(
        replica_id=replica_id, url="http://127.0.0.1:9", pool="us-mi355x", site="us",
        generation=Generation.MI355X, engine=EngineKind.SIM, node=node,
    )  # fmt: skip
    await registry.register_replica.remote(registration)
    return replica_id


async def node_health_in_table(registry: Any, replica_id: str) -> NodeHealth:
    table = await registry.snapshot.remote()
    replica = table.replica(replica_id)
    assert replica is not None
    return replica.node_health  # type: ignore[no-any-return]


async def wait_for_health(
    registry: Any, replica_id: str, health: NodeHealth, wait_s: float = REACH_WAIT_S
) -> None:
    async with asyncio.timeout(wait_s):
        while await node_health_in_table(registry, replica_id) is not health:
            await asyncio.sleep(0.05)


def port_down(at_s: float) -> NodeReading:
    """A node whose RoCE port is down: UNHEALTHY, reported at once."""
    return NodeReading(at_s, {}, ports_active=False, hbm_used_ratio=0.3)


def reporter(node: str, target: str, tls: TlsFiles | None) -> HealthReporter:
    return HealthReporter(
        node_key=node, read=port_down, control_plane=target, spec=FabricHealthSpec(),
        interval_s=BEAT_S, tls=tls,
    )  # fmt: skip


@contextlib.asynccontextmanager
async def running(health: HealthReporter) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(health.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_with_our_client_certificate_the_nodes_health_reaches_the_table(
    registry: Any, pki: Pki
) -> None:
    async def scenario() -> HealthReporter:
        replica_id = await replica_on(registry, "ray-node-good")
        async with mutual_tls_control_plane(registry, pki) as target:
            health = reporter("ray-node-good", target, pki.client_files())
            async with running(health):
                await wait_for_health(registry, replica_id, NodeHealth.UNHEALTHY)
        return health

    assert asyncio.run(scenario()).reported is NodeHealth.UNHEALTHY


@pytest.mark.parametrize("caller", ["plaintext", "no client certificate"])
def test_a_refused_reporter_logs_once_keeps_running_and_reports_nothing(
    registry: Any, pki: Pki, caller: str, caplog: pytest.LogCaptureFixture
) -> None:
    tls = {"plaintext": None, "no client certificate": pki.client_files(identity=False)}[caller]
    node = f"ray-node-{caller.replace(' ', '-')}"

    async def scenario() -> tuple[bool, NodeHealth]:
        replica_id = await replica_on(registry, node)
        async with mutual_tls_control_plane(registry, pki) as target:
            health = reporter(node, target, tls)
            async with running(health) as task:
                await asyncio.sleep(REFUSED_BEATS_S)
                alive = not task.done()
        return alive, await node_health_in_table(registry, replica_id)

    with caplog.at_level(logging.INFO, logger="orchestrator.fabric.reporter"):
        alive, in_table = asyncio.run(scenario())
    assert alive, "the reporter must outlive a refusing control plane"
    assert in_table is NodeHealth.HEALTHY, "nothing reached the registry"
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 1, "one warning per outage, not one per beat"
    assert failures[0].levelno == logging.WARNING
    assert "UNAVAILABLE" in failures[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_certificate_from_another_ca_is_refused_until_a_rotation_brings_ours(
    registry: Any, pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The Secret the reporter reads holds the wrong certificate; a rotation in place (as a
    Secret update does) fixes it, and the running reporter gets through without a restart."""
    mounted = TlsFiles(tmp_path / "tls.crt", tmp_path / "tls.key", pki.ca.ca)
    shutil.copy(pki.stranger_client.cert, tmp_path / "tls.crt")
    shutil.copy(pki.stranger_client.key, tmp_path / "tls.key")

    async def scenario() -> HealthReporter:
        replica_id = await replica_on(registry, "ray-node-rotated")
        async with mutual_tls_control_plane(registry, pki) as target:
            health = reporter("ray-node-rotated", target, mounted)
            async with running(health):
                await asyncio.sleep(REFUSED_BEATS_S)
                assert health.reported is None
                assert await node_health_in_table(registry, replica_id) is NodeHealth.HEALTHY
                shutil.copy(pki.client.key, tmp_path / "tls.key")
                shutil.copy(pki.client.cert, tmp_path / "tls.crt")
                await wait_for_health(registry, replica_id, NodeHealth.UNHEALTHY)
        return health

    with caplog.at_level(logging.INFO, logger="orchestrator.fabric.reporter"):
        health = asyncio.run(scenario())
    assert health.reported is NodeHealth.UNHEALTHY
    messages = [r.getMessage() for r in caplog.records]
    assert sum("failed" in m for m in messages) == 1
    assert any("again" in m for m in messages), "the recovery is logged"


def exporter_tree(root: Path) -> Path:
    """A node whose only RoCE port is down."""
    tree = NodeTreeBuilder(root)
    tree.rdma_port("bnxt_re0", BNXT_RE, netdev="ens1", state="1: DOWN")
    tree.netdev("ens1")
    tree.ethtool_dir.mkdir()
    return root


def test_the_exporter_command_reports_over_mutual_tls(
    registry: Any, pki: Pki, tmp_path: Path
) -> None:
    root = exporter_tree(tmp_path / "sys")
    log_path = tmp_path / "exporter.log"

    async def scenario(log: IO[bytes]) -> int | None:
        replica_id = await replica_on(registry, "ray-node-cli")
        async with mutual_tls_control_plane(registry, pki) as target:
            process = subprocess.Popen(
                [
                    sys.executable, "-m", "orchestrator", "exporter",
                    "--sysfs-root", str(root), "--ethtool-dir", str(root / "ethtool"),
                    "--port", "0", "--node", "gpu-node-17", "--site", "us",
                    "--control-plane", target, "--report-as", "ray-node-cli",
                    "--control-plane-tls-ca", str(pki.ca.ca),
                    "--control-plane-tls-cert", str(pki.client.cert),
                    "--control-plane-tls-key", str(pki.client.key),
                ],
                cwd=REPO, stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
            try:
                with contextlib.suppress(TimeoutError):
                    await wait_for_health(registry, replica_id, NodeHealth.UNHEALTHY, CLI_WAIT_S)
                    process.send_signal(signal.SIGTERM)
                    return await asyncio.to_thread(process.wait, 10)
                return None
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()

    with log_path.open("wb") as log:
        exit_code = asyncio.run(scenario(log))
    output = log_path.read_text()
    assert exit_code == 0, (
        f"the node's health never reached the table; the exporter said:\n{output}"
    )
    assert "failed" not in output and "Traceback" not in output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        pytest.param(
            lambda pki: [
                "--control-plane",
                "127.0.0.1:9",
                "--control-plane-tls-cert",
                pki.client.cert,
            ],
            "--control-plane-tls-cert and --control-plane-tls-key go together",
            id="cert-without-key",
        ),
        pytest.param(
            lambda pki: ["--control-plane-tls-ca", pki.ca.ca],
            "--control-plane-tls-* flags need --control-plane",
            id="tls-without-control-plane",
        ),
    ],
)
def test_bad_tls_flags_fail_before_anything_listens(
    pki: Pki,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: Callable[[Pki], list[Any]],
    message: str,
) -> None:
    argv = ["exporter", "--sysfs-root", str(tmp_path), "--node", "n", "--site", "s", "--port", "0"]
    assert main([*argv, *map(str, extra(pki))]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
