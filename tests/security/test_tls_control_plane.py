"""Mutual TLS between routers (and operators) and the control plane, over a real Registry actor:
only a client certificate signed by our CA gets in; plaintext, no certificate, or a certificate
from another CA is refused at the handshake."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from pki import Pki

from orchestrator.cli import main
from orchestrator.config import default_config
from orchestrator.controlplane import grpc_service, watch_client
from orchestrator.controlplane.grpc_service import SERVER_OPTIONS, start_control_plane_server
from orchestrator.controlplane.registry import start_registry
from orchestrator.controlplane.watch_client import WATCH_CHANNEL_OPTIONS, follow_routing_table
from orchestrator.security.files import TlsFiles
from orchestrator.table.source import TableHolder

pytestmark = pytest.mark.slow
NAMESPACE = "orchestrator-tls-test"
WATCH_WAIT_S = 10.0
REFUSED_WATCH_S = 2.0
SERVER_MIN_PING = "grpc.http2.min_ping_interval_without_data_ms"
CLIENT_PING_TIMES = (
    "grpc.keepalive_time_ms",
    "grpc.keepalive_timeout_ms",
    "grpc.http2.ping_timeout_ms",
)


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


def test_a_refused_watch_presents_its_rotated_client_certificate_from_the_next_call(
    registry: Any, pki: Pki, tmp_path: Path
) -> None:
    """The watch keeps one channel, but one whose certificate the control plane refuses is
    replaced once the files change on disk: the rotated certificate gets the table."""
    rotated = tmp_path / "rotated"
    issued = pki.stranger_ca.issue("router", server=False, into=rotated)
    tls = TlsFiles(issued.cert, issued.key, pki.ca.ca)

    async def run() -> tuple[int, int]:
        async with mutual_tls_control_plane(registry, pki) as target:
            holder = TableHolder()
            watch = asyncio.create_task(follow_routing_table(target, holder, retry_s=0.05, tls=tls))
            try:
                await asyncio.sleep(REFUSED_WATCH_S / 2)
                refused = holder.snapshot().version
                pki.ca.issue("router", server=False, into=rotated)  # same paths, our CA now
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(WATCH_WAIT_S):
                        while holder.snapshot().version == 0:
                            await asyncio.sleep(0.05)
                return refused, holder.snapshot().version
            finally:
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watch

    refused, rotated_version = asyncio.run(run())
    assert refused == 0
    assert rotated_version > 0


class FreezableProxy:
    """A TCP forwarder that can go silent: after `freeze()` it drops every byte both ways but
    keeps the connections open, like a partition that sends no FIN or RST."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        self._frozen = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    def freeze(self) -> None:
        self._frozen.set()

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._connect, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *_: object) -> None:
        for writer in self._writers:
            writer.close()
        assert self._server is not None
        self._server.close()

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream_port)
        self._writers += [writer, up_writer]
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(65536):
                if not self._frozen.is_set():
                    writer.write(chunk)
                    await writer.drain()


def test_watch_notices_a_silent_partition_by_keepalive(
    registry: Any, pki: Pki, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without keepalive pings a watch behind a silent partition waits forever; with them its
    stream fails and it reconnects. (Shorter ping times than production, same mechanism.)"""
    fast = {key: 500 for key in CLIENT_PING_TIMES}
    options = tuple((key, fast.get(key, value)) for key, value in WATCH_CHANNEL_OPTIONS)
    monkeypatch.setattr(watch_client, "WATCH_CHANNEL_OPTIONS", options)
    server_options = tuple(
        (key, 100 if key == SERVER_MIN_PING else value) for key, value in SERVER_OPTIONS
    )
    monkeypatch.setattr(grpc_service, "SERVER_OPTIONS", server_options)
    caplog.set_level(logging.WARNING, logger=watch_client.__name__)

    async def run() -> bool:
        server, port = await start_control_plane_server(registry, tls=pki.server_files(mutual=True))
        holder = TableHolder()
        proxy = FreezableProxy(port)
        try:
            async with proxy as target:
                watch = asyncio.create_task(
                    follow_routing_table(target, holder, retry_s=0.2, tls=pki.client_files())
                )
                try:
                    async with asyncio.timeout(WATCH_WAIT_S):
                        while holder.snapshot().version == 0:
                            await asyncio.sleep(0.05)
                    caplog.clear()
                    proxy.freeze()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(WATCH_WAIT_S):
                            while "unreachable" not in caplog.text:
                                await asyncio.sleep(0.05)
                    return "unreachable" in caplog.text
                finally:
                    watch.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await watch
        finally:
            await server.stop(grace=None)

    assert asyncio.run(run()), "the watch never noticed the silent partition"


def test_watch_channel_pings_and_the_control_plane_permits_it() -> None:
    """The production settings: a ping every 10 s, failing after 5 s unanswered, also between
    calls; the server allows pings 5 s apart without data, so it never answers with GOAWAY."""
    client = dict(WATCH_CHANNEL_OPTIONS)
    server = dict(SERVER_OPTIONS)
    assert client["grpc.keepalive_time_ms"] == 10_000
    assert client["grpc.keepalive_timeout_ms"] == client["grpc.http2.ping_timeout_ms"] == 5_000
    assert client["grpc.keepalive_permit_without_calls"] == 1
    assert server["grpc.keepalive_permit_without_calls"] == 1
    assert (
        server["grpc.http2.min_ping_interval_without_data_ms"] <= client["grpc.keepalive_time_ms"]
    )
