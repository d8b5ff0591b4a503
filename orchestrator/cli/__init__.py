"""The `orchestrator` command line: thin wrappers that parse arguments and call the packages.

Each command imports what it needs when it runs; the families in modules of their own
(`families.FAMILIES`) are imported only for their own commands.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from orchestrator.cli import tls
from orchestrator.cli.extras import missing_extra_message
from orchestrator.cli.families import add_families
from orchestrator.config.fields import DEFAULT_ROUTER_METRICS_PORT as DEFAULT_METRICS_PORT
from orchestrator.core.arg_types import from_parser, non_negative_float, positive_float
from orchestrator.core.arg_types import non_negative_int as _non_negative_int
from orchestrator.core.arg_types import port as _port
from orchestrator.core.arg_types import positive_int as _positive_int
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.generations import Generation, parse_generation

if TYPE_CHECKING:
    from orchestrator.config import OrchestratorConfig
    from orchestrator.controlplane.admin_client import ControlPlaneClient
    from orchestrator.security.files import TlsFiles

EXIT_USAGE = 2
EXIT_FAILURE = 1
DEFAULT_CONTROL_PLANE = "127.0.0.1:50052"


_generation = from_parser(parse_generation)


def cmd_sim_serve(args: argparse.Namespace) -> int:
    from orchestrator.sim.replica import ReplicaSettings, serve_forever

    settings = ReplicaSettings(
        generation=args.generation,
        model_name=args.served_model_name,
        time_scale=args.time_scale,
        seed=args.seed,
    )
    print(
        f"simulated {args.generation.value} replica of {args.served_model_name} on "
        f"http://{args.host}:{args.port} (time scale {args.time_scale:g}); Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )
    serve_forever(settings, args.host, args.port)
    return 0


def cmd_fleet_calibrate(args: argparse.Namespace) -> int:
    from orchestrator.fleet.figures import calibration_path, load_figures
    from orchestrator.sim.calibration import calibrate_generation
    from orchestrator.sim.calibration_report import (
        format_table,
        to_json,
        write_efficiencies,
        write_server_capacities,
    )

    figures = load_figures()
    generations = args.generation or list(Generation)
    results = []
    for generation in generations:
        has_target = figures.offline_target_tokens_per_s(generation) is not None
        action = "fitting Offline, predicting Server" if has_target else "predicting"
        print(f"{generation.value}: {action} ...", file=sys.stderr, flush=True)
        results.append(calibrate_generation(generation, figures=figures, seed=args.seed))
    if args.json:
        print(json.dumps(to_json(results), indent=2))
    else:
        print(format_table(results))
    if args.write:
        fitted = {
            r.generation: r.sequence_efficiency
            for r in results
            if figures.offline_target_tokens_per_s(r.generation) is not None
        }
        write_efficiencies(calibration_path(), fitted)
        capacities = {r.generation: r.server.tokens_per_s for r in results}
        write_server_capacities(calibration_path(), capacities)
        print(
            f"wrote {len(fitted)} efficiencies and {len(capacities)} capacity priors to "
            f"{calibration_path()}",
            file=sys.stderr,
        )
    return 0


def cmd_router(args: argparse.Namespace) -> int:
    from functools import partial
    from pathlib import Path

    from orchestrator.cli import router_attempts, router_limits, router_slo
    from orchestrator.forwarding.upstream import UpstreamSettings
    from orchestrator.frontends.http.app import HttpSettings
    from orchestrator.frontends.http.auth import ApiKeys
    from orchestrator.frontends.http.server import Listen, serve
    from orchestrator.router_service import RouterConfig, RouterService, RouterSettings
    from orchestrator.table.static_file import load_replicas_slo

    server_tls = tls.server_files(args)  # flags that do not go together, before any file is read
    file_targets = load_replicas_slo(Path(args.config)) if args.config else None
    settings = RouterSettings(
        latency_scale=args.latency_scale,
        slo=router_slo.targets(args, file_targets),
        upstream=UpstreamSettings(replica_tls=tls.client_files(args, "replica")),
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
    http = HttpSettings(
        max_body_bytes=args.max_body_bytes,
        api_keys=keys,
        stream_buffer_bytes=args.stream_buffer_bytes,
    )
    listen = Listen(
        args.host, args.port, args.workers, server_tls,
        metrics_host=args.metrics_host, metrics_port=args.metrics_port or None,
    )  # fmt: skip
    companions = []
    if args.grpc_port:
        from orchestrator.frontends.grpc.server import grpc_serving

        companions.append(
            partial(grpc_serving, host=args.host, port=args.grpc_port, tls=server_tls)
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


def _add_router_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    router.add_argument("--port", type=_port, default=8000, help="port (default 8000; 0 picks one)")
    router.add_argument(
        "--grpc-port", type=_port, default=50051, help="gRPC port (default 50051; 0 disables)"
    )
    router.add_argument(
        "--metrics-port", type=_port, default=DEFAULT_METRICS_PORT,
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
        "--max-body-bytes", type=_positive_int, default=8 * 1024 * 1024,
        help="largest request body accepted (default 8 MiB)",
    )  # fmt: skip
    router.add_argument(
        "--workers", type=_positive_int, default=1,
        help="worker processes sharing the port with SO_REUSEPORT (default 1)",
    )  # fmt: skip
    tls.add_server_flags(
        router, what="the HTTP and gRPC APIs",
        client_ca_help="require client certificates signed by this CA (mutual TLS)",
    )  # fmt: skip
    tls.add_client_flags(router, "control-plane", what="the control plane")
    tls.add_client_flags(router, "replica", what="https:// replicas")
    from orchestrator.cli import router_attempts, router_limits, router_slo

    router_slo.add_flags(router)
    router_limits.add_flags(router)
    router_attempts.add_flags(router)
    router.set_defaults(handler=cmd_router)


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

    config = _with_replica_tls(_stack_config(args), tls.client_files(args, "replica"))
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


def _with_replica_tls(config: OrchestratorConfig, files: TlsFiles | None) -> OrchestratorConfig:
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


def _operator(command: Callable[[ControlPlaneClient], str]) -> Callable[[argparse.Namespace], int]:
    """An operator command: its output on stdout, or exit 1 when the control plane is unreachable
    (a refused request raises `OrchestratorError`, exit 2)."""

    def handler(args: argparse.Namespace) -> int:
        from orchestrator.controlplane.admin_client import (
            ControlPlaneClient,
            ControlPlaneUnreachable,
        )

        try:
            client = ControlPlaneClient(
                args.control_plane, tls=tls.client_files(args, "control-plane")
            )
            print(command(client))
        except ControlPlaneUnreachable as error:
            print(f"orchestrator: error: {error}", file=sys.stderr)
            return EXIT_FAILURE
        return 0

    return handler


def cmd_status(args: argparse.Namespace) -> int:
    def show(client: ControlPlaneClient) -> str:
        from orchestrator.controlplane.admin_client import format_status
        from orchestrator.controlplane.capacity_status import format_capacity

        status = client.status()
        text = f"{format_status(status)}\n\n{format_capacity(status)}"
        if args.router is None:
            return json.dumps(status.to_json(), indent=2) if args.json else text
        from orchestrator.monitoring.router_slo import format_router_slo, router_slo

        slo = router_slo(args.router)
        if args.json:
            return json.dumps({**status.to_json(), "slo": slo.to_json()}, indent=2)
        return f"{text}\n{format_router_slo(slo)}"

    return _operator(show)(args)


def cmd_drain(args: argparse.Namespace) -> int:
    def drain(client: ControlPlaneClient) -> str:
        covered = ", ".join(client.drain(args.target)) or "no replicas"
        return f"draining {args.target}: {covered}; in-flight requests finish first"

    return _operator(drain)(args)


def cmd_scale(args: argparse.Namespace) -> int:
    def scale(client: ControlPlaneClient) -> str:
        client.scale(args.pool, args.replicas)
        return f"pool {args.pool}: desired size {args.replicas}"

    return _operator(scale)(args)


def _add_stack_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
        "--prometheus-port", type=_port, default=9090,
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
        "--port", type=_port, default=None, help="gRPC port (default: controlPlane.grpcPort)"
    )
    control_plane.add_argument(
        "--sd-port", type=_port, default=None,
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

    def operator(name: str, text: str) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=text)
        parser.add_argument(
            "--control-plane", default=DEFAULT_CONTROL_PLANE, metavar="HOST:PORT",
            help=f"control plane gRPC address (default {DEFAULT_CONTROL_PLANE})",
        )  # fmt: skip
        tls.add_client_flags(parser, "control-plane", what="the control plane")
        return parser

    status = operator("status", "sites, pools and replicas: generation, state, capacity, load")
    status.add_argument("--json", action="store_true", help="print JSON instead of tables")
    status.add_argument(
        "--router", metavar="URL",
        help="also show this router's latency targets and SLO attainment per class and pool,"
        " read from its metrics port (e.g. http://127.0.0.1:9190)",
    )  # fmt: skip
    status.set_defaults(handler=cmd_status)
    drain = operator("drain", "stop new requests to a pool (size 0) or one replica")
    drain.add_argument("target", metavar="POOL|REPLICA")
    drain.set_defaults(handler=cmd_drain)
    scale = operator("scale", "set a pool's desired number of replicas")
    scale.add_argument("pool", metavar="POOL")
    scale.add_argument("replicas", metavar="N", type=_non_negative_int)
    scale.set_defaults(handler=cmd_scale)


def _add_global_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")


def command_word(argv: Sequence[str]) -> str | None:
    """The top-level command `argv` asks for (None when it names none, e.g. `--help`)."""
    words = argparse.ArgumentParser(add_help=False)
    _add_global_options(words)
    words.add_argument("command", nargs="?")
    known, _ = words.parse_known_args(argv)
    command: str | None = known.command
    return command


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line parser; with `argv`, only the family of its command is imported in full
    (the others are listed by name), without it every command is complete."""
    parser = argparse.ArgumentParser(
        prog="orchestrator",
        description="Serve one GPT-OSS endpoint over AMD Instinct pools of several generations.",
    )
    _add_global_options(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sim = commands.add_parser("sim", help="the simulated engine").add_subparsers(
        dest="sim_command", required=True, metavar="SUBCOMMAND"
    )
    serve = sim.add_parser("serve", help="serve one simulated replica (vLLM's OpenAI API)")
    serve.add_argument("--generation", type=_generation, required=True, help="e.g. MI355X, MI300X")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8101, help="port (default 8101)")
    serve.add_argument(
        "--time-scale", type=non_negative_float, default=1.0,
        help="wall seconds per simulated second: >1 slows the replica down so a small machine "
        "can host several; 0 answers with no delay (default 1)",
    )  # fmt: skip
    serve.add_argument("--served-model-name", default="openai/gpt-oss-120b")
    serve.add_argument("--seed", type=int, default=0, help="seed for lengths and text")
    serve.set_defaults(handler=cmd_sim_serve)

    fleet = commands.add_parser("fleet", help="the capacity model").add_subparsers(
        dest="fleet_command", required=True, metavar="SUBCOMMAND"
    )
    calibrate = fleet.add_parser(
        "calibrate", help="fit efficiencies on MLPerf Offline, predict Server, print the table"
    )
    calibrate.add_argument("--json", action="store_true", help="print JSON instead of a table")
    calibrate.add_argument(
        "--generation", type=_generation, action="append",
        help="only this generation (repeatable; default all)",
    )  # fmt: skip
    calibrate.add_argument("--seed", type=int, default=0)
    calibrate.add_argument(
        "--write",
        action="store_true",
        help="store the fitted efficiencies and predicted capacities in the package data",
    )
    calibrate.set_defaults(handler=cmd_fleet_calibrate)
    _add_router_command(commands)
    _add_stack_commands(commands)
    add_families(commands, None if argv is None else command_word(argv), every=argv is None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    # Our processes start children only by fork + exec (Ray nodes, engines) or spawn (router
    # workers), so gRPC's fork handlers are never needed; with them, a fork while gRPC threads
    # run prints a warning and can abort the child. gRPC reads this when it initialises.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    try:
        parser = build_parser(words)
        args = parser.parse_args(words)
        logging.basicConfig(
            level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        return int(args.handler(args))
    except ModuleNotFoundError as error:
        message = missing_extra_message(error, command_word(words) or "")
        if message is None:
            raise
        print(message, file=sys.stderr)
        return EXIT_USAGE
    except OrchestratorError as error:
        print(f"orchestrator: error: {error.message}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
