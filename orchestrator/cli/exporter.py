"""Command family: the node exporter (RoCE NIC and HBM metrics)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from orchestrator.cli import tls
from orchestrator.cli.families import command_help
from orchestrator.core.arg_types import port as _port
from orchestrator.core.errors import ErrorCode, OrchestratorError

DEFAULT_PORT = 9400


def _label_value(raw: str) -> str:
    if not raw.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return raw


def _directory(flag: str, raw: str | None) -> Path | None:
    if raw is None:
        return None
    path = Path(raw)
    if not path.is_dir():
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT, f"{flag} {raw!r} is not a directory", param=flag
        )
    return path


def cmd_exporter(args: argparse.Namespace) -> int:
    from orchestrator.exporters.server import start_exporter
    from orchestrator.exporters.sysfs import resolve_sysfs_root

    given = _directory("--sysfs-root", args.sysfs_root)
    ethtool_dir = _directory("--ethtool-dir", args.ethtool_dir)
    root = resolve_sysfs_root(given or "/")
    control_plane_tls = tls.client_files(args, "control-plane")
    if control_plane_tls is not None and not args.control_plane:
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            "--control-plane-tls-* flags need --control-plane (where health is reported)",
            param="control-plane",
        )
    try:
        handle = start_exporter(
            root,
            node=args.node,
            site=args.site,
            host=args.host,
            port=args.port,
            ethtool_dir=ethtool_dir,
            rocm_version_file=args.rocm_version_file or None,
        )
    except OSError as error:
        print(
            f"orchestrator: error: cannot serve on {args.host}:{args.port}: {error}",
            file=sys.stderr,
        )
        return 1
    reporter = None
    if args.control_plane:
        from orchestrator.config.fabric_health import FabricHealthSpec
        from orchestrator.fabric.readings import exporter_reader
        from orchestrator.fabric.reporter import HealthReporter, ReporterThread

        reporter = ReporterThread(
            HealthReporter(
                node_key=args.report_as or args.node,
                read=exporter_reader(handle),
                control_plane=args.control_plane,
                spec=FabricHealthSpec(),
                tls=control_plane_tls,
            )
        )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    print(
        f"exporter for node {args.node} (site {args.site}) reading {root} on {handle.url}; "
        "Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if reporter is not None:
            reporter.stop()
        handle.stop()
    return 0


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register this family's subcommands on the top-level parser."""
    exporter = commands.add_parser("exporter", help=command_help("exporter"))
    exporter.add_argument(
        "--sysfs-root", default="/",
        help="the /sys directory, or a root holding sys/ (default /; a simulated tree in tests)",
    )  # fmt: skip
    exporter.add_argument("--node", type=_label_value, required=True, help="node label value")
    exporter.add_argument("--site", type=_label_value, required=True, help="site label value")
    exporter.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    exporter.add_argument(
        "--port", type=_port, default=DEFAULT_PORT,
        help=f"port (default {DEFAULT_PORT}; 0 picks one)",
    )  # fmt: skip
    exporter.add_argument(
        "--ethtool-dir",
        help="read `ethtool -S` output from <DIR>/<netdev>.txt instead of running ethtool",
    )
    exporter.add_argument(
        "--rocm-version-file", default="/opt/rocm/.info/version",
        help="the ROCm install's version file, for node_software_info ('' to skip)",
    )  # fmt: skip
    exporter.add_argument(
        "--control-plane", default=None, metavar="HOST:PORT",
        help="also evaluate this node's fabric health and report it there (ReportNodeHealth)",
    )  # fmt: skip
    exporter.add_argument(
        "--report-as", default=None, metavar="NODE",
        help="report health under this name: a Ray node id, or the Kubernetes node name its "
        "Ray workers carry as label k8s-node (default --node)",
    )  # fmt: skip
    tls.add_client_flags(exporter, "control-plane", what="the control plane")
    exporter.set_defaults(handler=cmd_exporter)
