"""Commands `orchestrator up` (the embedded stack) and `orchestrator control-plane` (the control
plane as a process of its own, as the Helm chart runs it)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from orchestrator.cli import tls
from orchestrator.core.arg_types import port, positive_float
from orchestrator.core.errors import ErrorCode, OrchestratorError

if TYPE_CHECKING:
    from orchestrator.config import OrchestratorConfig
    from orchestrator.security.files import TlsFiles


def _stack_config(args: argparse.Namespace) -> OrchestratorConfig:
    """The config file's contents, or the built-in config; a bad file raises `ConfigError`."""
    from orchestrator.config import default_config, load_config

    return default_config() if args.config is None else load_config(args.config)


def cmd_up(args: argparse.Namespace) -> int:
    from orchestrator.monitoring.embedded import PrometheusRequest
    from orchestrator.up.stack import run_up

    prometheus = (
        PrometheusRequest(args.prometheus_port, args.prometheus_max_for)
        if args.prometheus
        else None
    )
    return run_up(_stack_config(args), host=args.host, prometheus=prometheus)


def cmd_control_plane(args: argparse.Namespace) -> int:
    from orchestrator.controlplane.runner import run_control_plane

    config = with_replica_tls(_stack_config(args), tls.client_files(args, "replica"))
    server_tls = tls.server_files(args, client_ca_required=True, config=config.control_plane.tls)
    health_only = tuple(args.tls_health_only_client)
    if health_only and (server_tls is None or server_tls.ca is None):
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            "--tls-health-only-client names a client certificate: it needs mutual TLS"
            " (--tls-cert, --tls-key and --tls-client-ca)",
            param="--tls-health-only-client",
        )
    return run_control_plane(
        config,
        ray_address=args.ray_address,
        host=args.host,
        port=args.port,
        tls=server_tls,
        sd_port=config.control_plane.http_sd_port if args.sd_port is None else args.sd_port,
        health_only_clients=health_only,
    )


def with_replica_tls(config: OrchestratorConfig, files: TlsFiles | None) -> OrchestratorConfig:
    """`config` with `--replica-tls-*` (already read once, so a bad path fails at start) in place
    of its `controlPlane.replicaTls`: the external replicas' health checks use them."""
    from orchestrator.config.schema import ClientTlsSpec

    if files is None:
        return config
    paths = {"caFile": files.ca, "certFile": files.cert, "keyFile": files.key}
    spec = ClientTlsSpec.model_validate(
        {name: str(path) for name, path in paths.items() if path is not None}
    )
    control_plane = config.control_plane.model_copy(update={"replica_tls": spec})
    return config.model_copy(update={"control_plane": control_plane})


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up = commands.add_parser(
        "up", help="run everything locally: Ray, the control plane, the pools and a router"
    )
    up.add_argument("--config", help="orchestrator config (default: the built-in one)")
    up.add_argument("--host", default="127.0.0.1", help="router address (default 127.0.0.1)")
    up.add_argument(
        "--prometheus", action="store_true",
        help="also run a local Prometheus (/usr/bin/prometheus) with the alert and recording "
        "rules, scraping the router, the engines and the exporters",
    )  # fmt: skip
    up.add_argument(
        "--prometheus-port", type=port, default=9090,
        help="Prometheus port on 127.0.0.1 (default 9090; 0 picks one)",
    )  # fmt: skip
    up.add_argument(
        "--prometheus-max-for", type=positive_float, default=None, metavar="SECONDS",
        help="cap every alert's for: duration (demos and tests; default: as shipped)",
    )  # fmt: skip
    up.set_defaults(handler=cmd_up)

    control_plane = commands.add_parser(
        "control-plane", help="run only the control plane (registry, reconciler, gRPC)"
    )
    control_plane.add_argument("--config", help="orchestrator config (default: the built-in one)")
    control_plane.add_argument(
        "--ray-address", help="join this Ray cluster (default: start a local one from the config)"
    )
    control_plane.add_argument(
        "--host", default="127.0.0.1", help="gRPC address to bind (default 127.0.0.1)"
    )
    control_plane.add_argument(
        "--port", type=port, default=None, help="gRPC port (default: controlPlane.grpcPort)"
    )
    control_plane.add_argument(
        "--sd-port", type=port, default=None,
        help="serve the engines' Prometheus HTTP service discovery (GET /sd/engines) on --host at "
        "this port, over the same TLS as gRPC (default: controlPlane.httpSdPort; unset: none)",
    )  # fmt: skip
    tls.add_server_flags(
        control_plane, what="the ControlPlane API",
        client_ca_help="CA that signs the routers' and operators' client certificates "
        "(required with --tls-cert: the control plane serves mutual TLS only)",
    )  # fmt: skip
    control_plane.add_argument(
        "--tls-health-only-client", action="append", default=[], metavar="NAME",
        help="a client certificate whose subject CN or a DNS SAN is NAME may only report node "
        "health (the exporters'); its other calls are PERMISSION_DENIED (repeatable)",
    )  # fmt: skip
    tls.add_client_flags(control_plane, "replica", what="https:// external replicas")
    control_plane.set_defaults(handler=cmd_control_plane)
