"""`orchestrator up --prometheus`: a local Prometheus over what the stack started (the router, each
replica's engine, each simulated node's exporter), with the shipped rules loaded. The engines come
from the control plane's HTTP service discovery, so a replica `orchestrator scale` adds later, or
one that replaces a lost replica, is scraped without restarting anything."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from orchestrator.controlplane.control_plane import ControlPlane
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.fabric.embedded import EmbeddedFabric
from orchestrator.monitoring.embedded import PrometheusRequest, stack_prometheus
from orchestrator.monitoring.local_prometheus import (
    PROMETHEUS_BINARY,
    LocalPrometheus,
    PrometheusError,
    prometheus_available,
)
from orchestrator.monitoring.targets import ExporterEndpoint

PROMETHEUS_HOST = "127.0.0.1"


def usable_request(
    request: PrometheusRequest | None, progress: Callable[[str], None]
) -> PrometheusRequest | None:
    """The request if it can be served: None (with a line saying why) without the binary; a
    taken port fails before anything starts, like the stack's other ports."""
    if request is None:
        return None
    if not prometheus_available():
        progress(
            f"--prometheus: {PROMETHEUS_BINARY} is not installed "
            "(apt-get install prometheus); going on without it"
        )
        return None
    if request.port:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((PROMETHEUS_HOST, request.port))
            except OSError as error:
                raise OrchestratorError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"--prometheus-port: port {request.port} on {PROMETHEUS_HOST} is not free "
                    f"({error.strerror}); choose another",
                    param="prometheus-port",
                ) from None
    return request


async def start_prometheus(
    request: PrometheusRequest,
    *,
    router: str,
    control_plane: ControlPlane,
    fabric: EmbeddedFabric,
    latency_scale: float,
) -> LocalPrometheus:
    """Prometheus over the engines the control plane's service discovery lists (started with an
    `sd_port`), labelled with the simulated node each runs on, and over every node exporter of
    `fabric`. Raises `PrometheusError`."""
    discovery, sd_url = control_plane.discovery, control_plane.sd_url
    if discovery is None or sd_url is None:
        raise PrometheusError("the control plane serves no service discovery (no sd_port)")
    # Engines on a simulated node get its name, the `node` its exporter labels its series with.
    discovery.node_names = {node.ray_node: node.name for node in fabric.nodes.values()}
    exporters = [
        ExporterEndpoint(
            node.name,
            node.site,
            node.generation.value,
            f"{node.exporter.host}:{node.exporter.port}",
        )
        for node in fabric.nodes.values()
        if node.exporter is not None
    ]
    server = stack_prometheus(
        request,
        host=PROMETHEUS_HOST,
        routers=[router],
        exporters=exporters,
        latency_scale=latency_scale,
        engines_sd_url=sd_url,
    )
    try:
        server.start()  # in the loop's thread: the server dies with the thread that started it
        await asyncio.to_thread(server.wait_ready)
    except BaseException:
        server.stop()
        raise
    return server
