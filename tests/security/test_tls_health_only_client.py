"""Health-only callers of the control plane (`--tls-health-only-client`), over mutual TLS and a
real Registry actor: the exporters' certificate may report node health and nothing else; the
routers' certificate, signed by the same CA, may still call everything."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
import ray
from pki import Pki

from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2 as pb
from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2_grpc as pb_grpc
from orchestrator.cli import main
from orchestrator.config import default_config
from orchestrator.controlplane.grpc_service import peer_identities, start_control_plane_server
from orchestrator.controlplane.registry import start_registry
from orchestrator.security.files import TlsFiles
from orchestrator.security.grpc_tls import aio_channel

NAMESPACE = "orchestrator-tls-health-only-test"
EXPORTER_NAME = "release-orchestrator-exporter"
CALL_TIMEOUT_S = 20.0


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
async def control_plane_as(registry: Any, pki: Pki, caller: TlsFiles) -> AsyncIterator[Any]:
    """A stub for `caller` on a mutual-TLS control plane that makes EXPORTER_NAME health-only."""
    server, port = await start_control_plane_server(
        registry, tls=pki.server_files(mutual=True), health_only_clients=(EXPORTER_NAME,)
    )
    try:
        async with aio_channel(f"127.0.0.1:{port}", caller) as channel:
            yield pb_grpc.ControlPlaneServiceStub(channel)  # type: ignore[no-untyped-call]
    finally:
        await server.stop(grace=None)


def exporter_files(pki: Pki) -> TlsFiles:
    issued = pki.ca.issue(EXPORTER_NAME, server=False)
    return TlsFiles(issued.cert, issued.key, pki.ca.ca)


def registration(replica_id: str) -> pb.RegisterReplicaRequest:
    return pb.RegisterReplicaRequest(
        id=replica_id,
        url="http://10.1.0.9:8000",
        pool="us-legacy",
        site="us",
        generation="AMD-Instinct-MI300X-OAM",
        engine="vllm",
    )


async def outcome(call: Any) -> tuple[str, str]:
    """("OK", "") or the refused call's status name and details."""
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code().name, exc.details() or ""
    return "OK", ""


async def first_watch_outcome(stub: Any) -> tuple[str, str]:
    async def first() -> None:
        async for _ in stub.WatchRoutingTable(pb.WatchRoutingTableRequest()):
            return

    return await outcome(first())


@pytest.mark.slow
def test_health_only_certificate_may_report_health_and_nothing_else(
    registry: Any, pki: Pki
) -> None:
    async def run() -> dict[str, tuple[str, str]]:
        async with (
            asyncio.timeout(CALL_TIMEOUT_S),
            control_plane_as(registry, pki, exporter_files(pki)) as stub,
        ):
            healthy = pb.ReportNodeHealthRequest(node="gpu-node-7")
            return {
                "ReportNodeHealth": await outcome(stub.ReportNodeHealth(healthy)),
                "RegisterReplica": await outcome(stub.RegisterReplica(registration("stolen"))),
                "DeregisterReplica": await outcome(
                    stub.DeregisterReplica(pb.DeregisterReplicaRequest(id="stolen"))
                ),
                "Drain": await outcome(stub.Drain(pb.DrainRequest(target="us-legacy"))),
                "Scale": await outcome(stub.Scale(pb.ScaleRequest(pool="us-mi355x", replicas=0))),
                "GetStatus": await outcome(stub.GetStatus(pb.GetStatusRequest())),
                "WatchRoutingTable": await first_watch_outcome(stub),
            }

    outcomes = asyncio.run(run())
    assert outcomes.pop("ReportNodeHealth") == ("OK", "")
    for method, (code, details) in outcomes.items():
        assert code == "PERMISSION_DENIED", method
        assert EXPORTER_NAME in details and method in details
        assert "ReportNodeHealth" in details
    # The refused registration never reached the registry.
    listed = ray.get(registry.status.remote())
    assert "stolen" not in repr(listed)


@pytest.mark.slow
def test_router_certificate_may_still_call_everything(registry: Any, pki: Pki) -> None:
    async def run() -> dict[str, tuple[str, str]]:
        async with (
            asyncio.timeout(CALL_TIMEOUT_S),
            control_plane_as(registry, pki, pki.client_files()) as stub,
        ):
            return {
                "RegisterReplica": await outcome(stub.RegisterReplica(registration("legacy-r"))),
                "Drain": await outcome(stub.Drain(pb.DrainRequest(target="legacy-r"))),
                "DeregisterReplica": await outcome(
                    stub.DeregisterReplica(pb.DeregisterReplicaRequest(id="legacy-r"))
                ),
                "Scale": await outcome(stub.Scale(pb.ScaleRequest(pool="us-mi355x", replicas=2))),
                "GetStatus": await outcome(stub.GetStatus(pb.GetStatusRequest())),
                "ReportNodeHealth": await outcome(
                    stub.ReportNodeHealth(pb.ReportNodeHealthRequest(node="gpu-node-8"))
                ),
                "WatchRoutingTable": await first_watch_outcome(stub),
            }

    assert asyncio.run(run()) == dict.fromkeys(
        (
            "RegisterReplica", "Drain", "DeregisterReplica", "Scale", "GetStatus",
            "ReportNodeHealth", "WatchRoutingTable",
        ),
        ("OK", ""),
    )  # fmt: skip


def test_peer_identities_are_the_common_name_and_the_alternative_names() -> None:
    context = {
        "x509_common_name": [b"node-a"],
        "x509_subject_alternative_name": [b"release-orchestrator-exporter", b"10.0.0.1"],
        "transport_security_type": [b"ssl"],
    }
    assert peer_identities(context) == {"node-a", "release-orchestrator-exporter", "10.0.0.1"}
    assert peer_identities({}) == frozenset()


def test_health_only_client_without_mutual_tls_is_a_clear_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["control-plane", "--tls-health-only-client", EXPORTER_NAME]) == 2
    assert "--tls-health-only-client" in capsys.readouterr().err
