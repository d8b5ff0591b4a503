"""The router's gRPC server: RouterService, the standard health service and reflection.

Health says SERVING, for the whole server ("") and for RouterService, while the router has a
routable replica, as the HTTP `/ready` does; it is re-read every `health_interval_s`. Stopping is
graceful in the order the gRPC health docs give: health flips to NOT_SERVING for good (so load
balancers stop sending), the server stops accepting calls, and in-flight streams get up to
`grace_s` to finish before they are cancelled (which cancels their upstream requests).

The server runs in the router's event loop and shares its `RouterService` with the HTTP frontend;
it neither starts nor stops that service. With `tls`, the port speaks only TLS (a plaintext client
fails its handshake: UNAVAILABLE), and a rotated certificate serves new connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Final

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from orchestrator.config.grpc import GrpcSpec
from orchestrator.config.settings_model import CheckedSettings
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.frontends.grpc.auth import KeyInterceptor
from orchestrator.frontends.grpc.servicer import (
    SERVICE_NAME,
    RouterServicer,
    add_router_servicer,
)
from orchestrator.router_service import RouterService
from orchestrator.security.files import TlsFiles
from orchestrator.security.grpc_tls import server_credentials

log = logging.getLogger(__name__)

DEFAULT_PORT: Final = 50051
SERVING: Final = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING: Final = health_pb2.HealthCheckResponse.NOT_SERVING


class GrpcSettings(GrpcSpec, CheckedSettings):
    """The `router.grpc` section's bounds (`config/grpc.py`): `grace_s`, how long in-flight
    calls may run on after `stop()`; `health_interval_s`, how often health re-reads readiness;
    `max_message_bytes` caps a request; `write_stall_s` cuts a stream whose client takes no
    message; `handshake_s` and `idle_s` bound a connection's handshake and its time without
    calls. A bad value raises INVALID_ARGUMENT naming the field."""


class GrpcServer:
    """One `grpc.aio` server over a `RouterService`; build, start and stop it in the router's
    event loop."""

    def __init__(
        self,
        service: RouterService,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        settings: GrpcSettings | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        self.settings = settings or GrpcSettings()
        self._service = service
        # Built first: bad TLS files fail here, naming the flag, before anything binds.
        self._credentials = None if tls is None else server_credentials(tls)
        self._address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.health = health.aio.HealthServicer()
        servicer = RouterServicer(service, self.settings.write_stall_s)
        keys = KeyInterceptor(
            lambda: service.api_keys,
            f"/{SERVICE_NAME}/",
            lambda: servicer.count(grpc.StatusCode.UNAUTHENTICATED),
        )
        settings = self.settings
        self.server = grpc.aio.server(
            interceptors=(keys,),
            options=[
                ("grpc.max_receive_message_length", settings.max_message_bytes),
                ("grpc.so_reuseport", 1),  # router workers share the port, as they do for HTTP
                ("grpc.server_handshake_timeout_ms", int(settings.handshake_s * 1000)),
                ("grpc.max_connection_idle_ms", int(settings.idle_s * 1000)),
            ],
        )
        add_router_servicer(servicer, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server
        )
        self.port = 0
        self._follower: asyncio.Task[None] | None = None

    async def start(self) -> int:
        """Bind and start serving; returns the bound port (useful with port 0)."""
        try:
            if self._credentials is None:
                self.port = self.server.add_insecure_port(self._address)
            else:
                self.port = self.server.add_secure_port(self._address, self._credentials)
        except RuntimeError:  # grpc's way of saying the address cannot be bound
            self.port = 0
        if self.port == 0:
            raise OrchestratorError(
                ErrorCode.UNAVAILABLE, f"cannot bind the gRPC server to {self._address}"
            )
        await self._set_health()
        await self.server.start()
        self._follower = asyncio.create_task(self._follow_readiness(), name="grpc-health")
        return self.port

    async def stop(self, grace_s: float | None = None) -> None:
        """Flip health to NOT_SERVING, refuse new calls, let in-flight ones run up to the grace."""
        await self.health.enter_graceful_shutdown()
        follower, self._follower = self._follower, None
        if follower is not None:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
        await self.server.stop(self.settings.grace_s if grace_s is None else grace_s)

    async def _set_health(self) -> None:
        status = SERVING if self._service.routable_replicas() > 0 else NOT_SERVING
        for name in ("", SERVICE_NAME):
            await self.health.set(name, status)

    async def _follow_readiness(self) -> None:
        while True:
            await asyncio.sleep(self.settings.health_interval_s)
            try:
                await self._set_health()
            except Exception:  # keep health following; a bug here must not freeze it
                log.exception("cannot update gRPC health")


async def start_grpc_server(
    service: RouterService,
    host: str,
    port: int = DEFAULT_PORT,
    settings: GrpcSettings | None = None,
    tls: TlsFiles | None = None,
) -> GrpcServer:
    """Start serving gRPC for `service` on `host:port` (0 picks a free port; see `.port`)."""
    server = GrpcServer(service, host, port, settings, tls)
    await server.start()
    log.info("gRPC %s on %s:%d", SERVICE_NAME, host, server.port)
    return server


@contextlib.asynccontextmanager
async def grpc_serving(
    service: RouterService,
    host: str,
    port: int | None = DEFAULT_PORT,
    settings: GrpcSettings | None = None,
    tls: TlsFiles | None = None,
) -> AsyncIterator[GrpcServer | None]:
    """Serve gRPC for the duration of the block, then stop gracefully; port None serves nothing."""
    if port is None:
        yield None
        return
    server = await start_grpc_server(service, host, port, settings, tls)
    try:
        yield server
    finally:
        await server.stop()
