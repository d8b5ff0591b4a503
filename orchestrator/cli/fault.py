"""Command family: fault injection into the simulated fabric of a running `orchestrator up`.

    orchestrator fault inject --node us-mi355x --kind pfc-storm [--duration 30]
    orchestrator fault clear [--node us-mi355x] [--kind pfc-storm]
    orchestrator fault list

The stack is found by its control plane address (the same `--control-plane` as `status`); its
fabric root holds the manifest of simulated nodes and the fault file the simulator polls.
Exit status: 0 done, 1 no running stack there, 2 a bad node, kind or duration.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from orchestrator.cli.families import command_help
from orchestrator.cli.operator import DEFAULT_CONTROL_PLANE
from orchestrator.core.arg_types import seconds
from orchestrator.fabric.faults import Fault, add_fault, read_faults, remove_faults
from orchestrator.fabric.manifest import StackManifest, default_fabric_root, read_manifest
from orchestrator.fabric.model import FaultKind

KINDS = tuple(kind.value for kind in FaultKind)


class _NoStack(Exception):
    pass


class _BadArgument(Exception):
    pass


def _stack(args: argparse.Namespace) -> tuple[Path, StackManifest]:
    root = Path(args.fabric_root) if args.fabric_root else default_fabric_root(args.control_plane)
    manifest = read_manifest(root)
    if manifest is None:
        raise _NoStack(
            f"no running stack with a simulated fabric for control plane {args.control_plane}"
            f" (nothing alive at {root}); start one with `orchestrator up`, or pass the"
            " --control-plane it runs"
        )
    return root, manifest


def _node(manifest: StackManifest, name: str | None) -> str | None:
    if name is not None and manifest.node(name) is None:
        known = ", ".join(n.name for n in manifest.nodes) or "none"
        raise _BadArgument(f"unknown node {name!r}; simulated nodes: {known}")
    return name


def cmd_fault_inject(args: argparse.Namespace) -> int:
    root, manifest = _stack(args)
    node = _node(manifest, args.node)
    assert node is not None
    now = time.time()
    until = now + args.duration if args.duration is not None else None
    add_fault(root, Fault(node, FaultKind(args.kind), now, until))
    entry = manifest.node(node)
    hits = ", ".join(entry.replicas) if entry and entry.replicas else "no replicas"
    lasting = f"for {args.duration:g} s" if args.duration is not None else "until cleared"
    print(f"injected {args.kind} on {node} ({hits}) {lasting}")
    return 0


def cmd_fault_clear(args: argparse.Namespace) -> int:
    root, manifest = _stack(args)
    node = _node(manifest, args.node)
    removed = remove_faults(root, node=node, kind=FaultKind(args.kind) if args.kind else None)
    if not removed:
        print("no matching fault was active")
    for fault in removed:
        print(f"cleared {fault.kind.value} on {fault.node}")
    return 0


def cmd_fault_list(args: argparse.Namespace) -> int:
    root, manifest = _stack(args)
    now = time.time()
    faults = [f for f in read_faults(root) if f.active(now)]
    for node in manifest.nodes:
        kinds = ", ".join(f.kind.value for f in faults if f.node == node.name) or "-"
        print(f"{node.name:<16} {node.site:<6} {node.generation:<8} faults: {kinds:<24}"
              f" exporter {node.exporter_url}")  # fmt: skip
    return 0


def _run(handler: argparse.Namespace) -> int:
    try:
        code: int = handler.fault_handler(handler)
        return code
    except _NoStack as error:
        print(f"orchestrator fault: error: {error}", file=sys.stderr)
        return 1
    except (_BadArgument, ValueError) as error:
        print(f"orchestrator fault: error: {error}", file=sys.stderr)
        return 2


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register this family's subcommands on the top-level parser."""
    fault = commands.add_parser("fault", help=command_help("fault")).add_subparsers(
        dest="fault_command", required=True, metavar="{inject,clear,list}"
    )

    def sub(name: str, text: str) -> argparse.ArgumentParser:
        parser = fault.add_parser(name, help=text)
        parser.add_argument(
            "--control-plane", default=DEFAULT_CONTROL_PLANE, metavar="HOST:PORT",
            help=f"the control plane of the running stack (default {DEFAULT_CONTROL_PLANE})",
        )  # fmt: skip
        parser.add_argument(
            "--fabric-root", default=None, metavar="DIR",
            help="the stack's fabric directory (default: found from --control-plane)",
        )  # fmt: skip
        parser.set_defaults(handler=_run)
        return parser

    inject = sub("inject", "start a fault on one simulated node")
    inject.add_argument("--node", required=True, help="a simulated node (see `fault list`)")
    inject.add_argument("--kind", required=True, choices=KINDS, help="what goes wrong")
    inject.add_argument(
        "--duration", type=seconds, default=None, metavar="S",
        help="seconds until it clears itself (default: until `fault clear`)",
    )  # fmt: skip
    inject.set_defaults(fault_handler=cmd_fault_inject)

    clear = sub("clear", "end faults (all of them, or those on --node and/or of --kind)")
    clear.add_argument("--node", default=None)
    clear.add_argument("--kind", default=None, choices=KINDS)
    clear.set_defaults(fault_handler=cmd_fault_clear)

    listing = sub("list", "the simulated nodes, their faults and exporters")
    listing.set_defaults(fault_handler=cmd_fault_list)
