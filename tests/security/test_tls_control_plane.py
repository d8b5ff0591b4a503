"""Mutual TLS between routers (and operators) and the control plane, over a real Registry actor:
only a client certificate signed by our CA gets in; plaintext, no certificate, or a certificate
from another CA is refused at the handshake."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import ray
from pki import Pki

from orchestrator.cli import main
from orchestrator.config import default_config
from orchestrator.controlplane.grpc_service import start_control_plane_server
from orchestrator.controlplane.registry import start_registry
from orchestrator.controlplane.watch_client import follow_routing_table
from orchestrator.security.files import TlsFiles
from orchestrator.table.source import TableHolder

pytestmark = pytest.mark.slow
NAMESPACE = "orchestrator-tls-test"
WATCH_WAIT_S = 10.0
REFUSED_WATCH_S = 2.0


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


async def watched_version(target: str, tls: TlsFiles | None, wait_s: float) -> int:
    """The table version a router's watch holds after up to `wait_s` seconds."""
    holder = TableHolder()
    watch = asyncio.create_task(follow_routing_table(target, holder, retry_s=0.2, tls=tls))
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                while holder.snapshot().version == 0:
                    await asyncio.sleep(0.05)
        return holder.snapshot().version
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch


def operator_status(target: str, tls: TlsFiles | None) -> str:
    """`orchestrator status` with the TLS flags for `tls`: "ok" (exit 0), or "unreachable" when
    the control plane refused the connection (exit 1)."""
    argv = ["status", "--control-plane", target]
    if tls is not None:
        argv += ["--control-plane-tls-ca", str(tls.ca)]
        if tls.cert is not None and tls.key is not None:
            argv += ["--control-plane-tls-cert", str(tls.cert)]
            argv += ["--control-plane-tls-key", str(tls.key)]
    return {0: "ok", 1: "unreachable"}.get(main(argv), "other")


def test_router_with_our_client_certificate_follows_the_table(registry: Any, pki: Pki) -> None:
    async def run() -> tuple[int, str]:
        async with mutual_tls_control_plane(registry, pki) as target:
            version = await watched_version(target, pki.client_files(), WATCH_WAIT_S)
            status = await asyncio.to_thread(operator_status, target, pki.client_files())
            return version, status

    version, status = asyncio.run(run())
    assert version > 0
    assert status == "ok"


@pytest.mark.parametrize(
    "caller",
    ["plaintext", "no client certificate", "client certificate from another CA"],
)
def test_control_plane_refuses_callers_without_our_client_certificate(
    registry: Any, pki: Pki, caller: str
) -> None:
    tls = {
        "plaintext": None,
        "no client certificate": pki.client_files(identity=False),
        "client certificate from another CA": pki.client_files(stranger=True),
    }[caller]

    async def run() -> tuple[int, str]:
        async with mutual_tls_control_plane(registry, pki) as target:
            version = await watched_version(target, tls, REFUSED_WATCH_S)
            status = await asyncio.to_thread(operator_status, target, tls)
            return version, status

    version, status = asyncio.run(run())
    assert version == 0  # the watch never got a table
    assert status == "unreachable"
