"""The control plane's health checks of `https://` external replicas use `controlPlane.replicaTls`
(or `orchestrator control-plane --replica-tls-*`): a simulated replica served over TLS by a private
CA, wanting a client certificate, is registered and listed ready only when the checker trusts that
CA and presents a certificate it signed; with the system's trust store, or without a certificate,
it never is."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from pki import Pki
from tls_replica import TlsReplicaThread

from orchestrator import cli
from orchestrator.cli import stack as cli_stack
from orchestrator.cli import tls
from orchestrator.config import OrchestratorConfig, default_config, validate_config
from orchestrator.controlplane.external_pools import ExternalReplicaChecker
from orchestrator.controlplane.registry import start_registry
from orchestrator.core.records import ReplicaState
from orchestrator.table.snapshot import RoutingTable

pytestmark = pytest.mark.slow
NAMESPACE = "orchestrator-external-tls-test"
CHECK_INTERVAL_S = 0.2
# Passes the checker gets to register the replica: one suffices when the handshake succeeds.
PASSES = 6


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    # "local": a cluster of our own, even while another test run has one on this machine.
    ray.init(address="local", num_cpus=1, include_dashboard=False, namespace=NAMESPACE)
    try:
        yield
    finally:
        ray.shutdown()


def config_for(url: str, replica_tls: dict[str, str] | None) -> OrchestratorConfig:
    control_plane: dict[str, Any] = {} if replica_tls is None else {"replicaTls": replica_tls}
    return validate_config(
        {
            "apiVersion": "orchestrator/v1alpha1",
            "kind": "Orchestrator",
            "sites": {"lab": {}},
            "pools": [
                {
                    "name": "lab-tls",
                    "site": "lab",
                    "generation": "MI355X",
                    "engine": "external",
                    "endpoints": [url],
                }
            ],
            "controlPlane": control_plane,
        }
    )


def checked_table(config: OrchestratorConfig, registry_name: str) -> RoutingTable:
    """The registry's table after the checker has run `PASSES` passes over `config`'s pool."""
    registry = start_registry(config, name=registry_name, namespace=NAMESPACE)
    try:

        async def check() -> None:
            checker = ExternalReplicaChecker(config, registry, interval_s=CHECK_INTERVAL_S)
            task = asyncio.create_task(checker.run())
            await asyncio.sleep(PASSES * CHECK_INTERVAL_S)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        asyncio.run(check())
        table: RoutingTable = ray.get(registry.snapshot.remote(), timeout=10)
        return table
    finally:
        ray.kill(registry, no_restart=True)


@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize(
    ("files", "listed"),
    [
        pytest.param(("ca", "cert", "key"), True, id="our-ca-and-client-certificate"),
        pytest.param((), False, id="system-trust-store"),
        pytest.param(("ca",), False, id="our-ca-without-a-client-certificate"),
    ],
)
def test_an_https_external_replica_is_healthy_only_with_the_private_ca_and_certificate(
    pki: Pki, https_replica: TlsReplicaThread, files: tuple[str, ...], listed: bool
) -> None:
    paths = {
        "ca": ("caFile", pki.ca.ca),
        "cert": ("certFile", pki.client.cert),
        "key": ("keyFile", pki.client.key),
    }
    replica_tls = dict(paths[name] for name in files)
    config = config_for(
        https_replica.url, {k: str(v) for k, v in replica_tls.items()} if files else None
    )
    table = checked_table(config, f"registry-{'-'.join(files) or 'none'}")
    states = {r.replica_id: r.state for r in table.replicas}
    assert states == ({"lab-tls-0": ReplicaState.READY} if listed else {})


def test_the_control_plane_flags_become_its_replica_tls(pki: Pki) -> None:
    args = cli.build_parser().parse_args(
        [
            "control-plane",
            f"--replica-tls-ca={pki.ca.ca}",
            f"--replica-tls-cert={pki.client.cert}",
            f"--replica-tls-key={pki.client.key}",
        ]
    )
    config = cli_stack.with_replica_tls(default_config(), tls.client_files(args, "replica"))
    spec = config.control_plane.replica_tls
    assert spec is not None
    assert (spec.ca_file, spec.cert_file, spec.key_file) == (
        str(pki.ca.ca),
        str(pki.client.cert),
        str(pki.client.key),
    )
    assert cli_stack.with_replica_tls(default_config(), None).control_plane.replica_tls is None


def test_a_half_given_client_certificate_is_refused_before_anything_starts(
    pki: Pki, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["control-plane", f"--replica-tls-cert={pki.client.cert}"])
    assert code == cli.EXIT_USAGE
    assert "--replica-tls-cert and --replica-tls-key go together" in capsys.readouterr().err
