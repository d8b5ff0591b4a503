"""Command family: `orchestrator plan`, the capacity planner (virtual-time checks of each mix)."""

from __future__ import annotations

import argparse
import sys

from orchestrator.bench.plan.command import add_arguments, run
from orchestrator.cli import tls
from orchestrator.cli.families import command_help
from orchestrator.cli.operator import EXIT_UNREACHABLE, add_control_plane_flags
from orchestrator.core.generations import Generation, parse_generation


def _fleet_capacities(args: argparse.Namespace) -> dict[Generation, float] | None:
    """Mean capacity per generation of the ready replicas in the control plane's routing table."""
    from orchestrator.controlplane.admin_client import ControlPlaneClient, ControlPlaneUnreachable

    client = ControlPlaneClient(args.control_plane, tls=tls.client_files(args, "control-plane"))
    try:
        status = client.status()
    except ControlPlaneUnreachable as error:
        print(f"orchestrator: error: {error}", file=sys.stderr)
        return None
    sums: dict[Generation, list[float]] = {}
    for row in status.replicas:
        if row.state == "ready" and row.capacity_tokens_per_s > 0:
            sums.setdefault(parse_generation(row.generation), []).append(row.capacity_tokens_per_s)
    return {generation: sum(v) / len(v) for generation, v in sums.items()}


def cmd_plan(args: argparse.Namespace) -> int:
    capacities: dict[Generation, float] = {}
    if args.from_fleet:
        learned = _fleet_capacities(args)
        if learned is None:
            return EXIT_UNREACHABLE
        capacities = learned
        shown = ", ".join(f"{g.value} {c:,.0f}" for g, c in sorted(learned.items())) or "none"
        print(f"capacity per GPU from the fleet (tokens/s): {shown}", file=sys.stderr)
    return run(args, capacities)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `plan` on the top-level parser."""
    parser = commands.add_parser(
        "plan",
        help=command_help("plan"),
        description=(
            "Find the cheapest (or lowest-power) mix of GPUs per generation and site that serves "
            "a demand within p99 TTFT/TPOT targets, checked in virtual time with the real router."
        ),
    )
    add_arguments(parser)
    parser.add_argument(
        "--from-fleet", action="store_true",
        help="take each generation's capacity from a running control plane's routing table",
    )  # fmt: skip
    add_control_plane_flags(parser)
    parser.set_defaults(handler=cmd_plan)
