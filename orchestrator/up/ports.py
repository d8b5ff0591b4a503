"""Ports the embedded stack needs, checked free before anything starts."""

from __future__ import annotations

import socket

from orchestrator.config.schema import OrchestratorConfig
from orchestrator.controlplane.placement import node_groups
from orchestrator.core.errors import ErrorCode, OrchestratorError


def check_ports_free(config: OrchestratorConfig, host: str) -> None:
    """Fail before starting anything when a port the stack needs is taken."""
    wanted = {
        "router.httpPort": (host, config.router.http_port),
        "router.grpcPort": (host, config.router.grpc_port),
        "router.metricsPort": ("127.0.0.1", config.router.metrics_port),
        "controlPlane.grpcPort": ("127.0.0.1", config.control_plane.grpc_port),
    }
    if config.control_plane.http_sd_port is not None:
        wanted["controlPlane.httpSdPort"] = ("127.0.0.1", config.control_plane.http_sd_port)
    if config.exporters.port:
        # Node k's exporter takes exporters.port + k, one node per (site, generation).
        for k in range(len(node_groups(config))):
            field = "exporters.port" if k == 0 else f"exporters.port + {k}"
            wanted[field] = (host, config.exporters.port + k)
    for field, (address, port) in wanted.items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, port))
            except OSError as error:
                raise OrchestratorError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"{field}: port {port} on {address} is not free ({error.strerror}); "
                    "is another orchestrator running? choose another port in the config"
                    + (" (exporters.port: 0 picks free ones)" if "exporters" in field else ""),
                    param=field.split(" ")[0],  # "exporters.port + 1" is exporters.port
                ) from None
