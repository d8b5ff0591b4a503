"""Command `orchestrator router`: one router over a replicas file or the control plane's table."""

from __future__ import annotations

import argparse

from orchestrator.cli import router_attempts, router_limits, router_replicas, router_slo, tls
from orchestrator.config.fields import DEFAULT_ROUTER_METRICS_PORT as DEFAULT_METRICS_PORT
from orchestrator.config.flags import add_flags as add_model_flags
from orchestrator.config.flags import from_args
from orchestrator.config.grpc import GrpcSpec
from orchestrator.core.arg_types import port, positive_float, positive_int


def cmd_router(args: argparse.Namespace) -> int:
    from functools import partial
    from pathlib import Path

    from orchestrator.frontends.http.auth import ApiKeys
    from orchestrator.frontends.http.server import Listen, serve
    from orchestrator.router_service import RouterConfig, RouterService, RouterSettings
    from orchestrator.table.static_file import load_replicas_slo

    server_tls = tls.server_files(args)  # flags that do not go together, before any file is read
    file_targets = load_replicas_slo(Path(args.config)) if args.config else None
    settings = RouterSettings(
        **router_attempts.timing(args).model_dump(),
        latency_scale=args.latency_scale,
        slo=router_slo.targets(args, file_targets),
        breaker=router_replicas.breaker_settings(args),
        upstream=router_replicas.upstream_settings(args, tls.client_files(args, "replica")),
        admission=router_limits.admission_settings(args),
    )
    settings = router_attempts.with_attempts(settings, args)
    config = RouterConfig(
        replicas_file=Path(args.config or ""),
        profile=args.profile,
        settings=settings,
    )
    if args.control_plane is None:
        RouterService.from_config(config)  # reject a bad file or profile before serving anything
    keys = None
    if args.api_keys_file is not None:
        keys = ApiKeys.from_file(Path(args.api_keys_file))
    elif args.api_keys_env is not None:
        keys = ApiKeys.from_env(args.api_keys_env)
    http = router_limits.http_settings(args, keys)
    listen = Listen(
        args.host, args.port, args.workers, server_tls,
        metrics_host=args.metrics_host, metrics_port=args.metrics_port or None,
    )  # fmt: skip
    companions = []
    if args.grpc_port:
        from orchestrator.frontends.grpc.server import GrpcSettings, grpc_serving

        grpc = GrpcSettings(**from_args(GrpcSpec, args).model_dump())
        companions.append(
            partial(
                grpc_serving, host=args.host, port=args.grpc_port, settings=grpc, tls=server_tls
            )
        )
    if args.control_plane is not None:
        from orchestrator.router_process.following import serve_following

        return serve_following(
            args.control_plane,
            profile=args.profile,
            settings=settings,
            http=http,
            listen=listen,
            companions=companions,
            control_plane_tls=tls.client_files(args, "control-plane"),
            log_level=args.log_level,
        )
    return serve(
        partial(RouterService.from_config, config), http, listen, args.log_level,
        companions=companions,
    )  # fmt: skip


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    router = commands.add_parser(
        "router",
        help="serve the OpenAI API over a replicas file or the control plane's routing table",
    )
    table = router.add_mutually_exclusive_group(required=True)
    table.add_argument("--config", help="replicas file (kind: Replicas)")
    table.add_argument(
        "--control-plane", metavar="HOST:PORT",
        help="follow this control plane's routing table instead of a replicas file",
    )  # fmt: skip
    router.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    router.add_argument("--port", type=port, default=8000, help="port (default 8000; 0 picks one)")
    router.add_argument(
        "--grpc-port", type=port, default=50051, help="gRPC port (default 50051; 0 disables)"
    )
    router.add_argument(
        "--metrics-port", type=port, default=DEFAULT_METRICS_PORT,
        help=f"port of /metrics for Prometheus, never served on the API port (default "
        f"{DEFAULT_METRICS_PORT}; 0 disables)",
    )  # fmt: skip
    router.add_argument(
        "--metrics-host", default="127.0.0.1",
        help="address of the metrics port (default 127.0.0.1; in a pod, 0.0.0.0)",
    )  # fmt: skip
    router.add_argument("--profile", default="capacity", help="routing profile (default capacity)")
    router.add_argument(
        "--latency-scale", type=positive_float, default=1.0,
        help="the replicas are simulated and run this many times slower than real hardware (their"
        " timeScale): the latency targets, the request deadline (600 s) and the queue timeout"
        " are stretched by it (default 1)",
    )  # fmt: skip
    keys = router.add_mutually_exclusive_group()
    keys.add_argument("--api-keys-file", help="require one of these keys (one per line)")
    keys.add_argument("--api-keys-env", help="require one of the keys in this environment variable")
    router.add_argument(
        "--workers", type=positive_int, default=1,
        help="worker processes sharing the port with SO_REUSEPORT (default 1)",
    )  # fmt: skip
    tls.add_server_flags(
        router, what="the HTTP and gRPC APIs",
        client_ca_help="require client certificates signed by this CA (mutual TLS)",
    )  # fmt: skip
    tls.add_client_flags(router, "control-plane", what="the control plane")
    tls.add_client_flags(router, "replica", what="https:// replicas")
    router_slo.add_flags(router)
    router_limits.add_flags(router)
    router_attempts.add_flags(router)
    router_replicas.add_flags(router)
    add_model_flags(router, GrpcSpec)
    router.set_defaults(handler=cmd_router)
