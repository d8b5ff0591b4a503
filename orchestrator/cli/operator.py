"""The operator's commands: `orchestrator status`, `drain` and `scale`, over the control plane's
gRPC API. Output on stdout; exit 1 when the control plane does not answer, 2 when it refuses
the request (an unknown pool, a bad size)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from orchestrator.cli import tls
from orchestrator.core.arg_types import non_negative_int

if TYPE_CHECKING:
    from orchestrator.controlplane.admin_client import ControlPlaneClient

DEFAULT_CONTROL_PLANE: Final = "127.0.0.1:50052"
EXIT_UNREACHABLE: Final = 1


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
            return EXIT_UNREACHABLE
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


def add_control_plane_flags(parser: argparse.ArgumentParser) -> None:
    """`--control-plane HOST:PORT` and its TLS flags, for every command that calls it."""
    parser.add_argument(
        "--control-plane", default=DEFAULT_CONTROL_PLANE, metavar="HOST:PORT",
        help=f"control plane gRPC address (default {DEFAULT_CONTROL_PLANE})",
    )  # fmt: skip
    tls.add_client_flags(parser, "control-plane", what="the control plane")


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    def operator(name: str, text: str) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=text)
        add_control_plane_flags(parser)
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
    scale.add_argument("replicas", metavar="N", type=non_negative_int)
    scale.set_defaults(handler=cmd_scale)
