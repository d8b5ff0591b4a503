"""Command family: benchmarks: LoadGen harness and the virtual-time fleet simulation."""

from __future__ import annotations

import argparse

from orchestrator.bench.loadgen import command as loadgen
from orchestrator.bench.simulate import command as simulate
from orchestrator.cli.families import command_help


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register this family's subcommands on the top-level parser."""
    bench = commands.add_parser("bench", help=command_help("bench"))
    family = bench.add_subparsers(dest="bench_command", required=True, metavar="SUBCOMMAND")
    loadgen.add_arguments(
        family.add_parser(
            "loadgen",
            help="MLCommons LoadGen (Offline or Server) against an endpoint",
            description="Run MLCommons LoadGen against a router endpoint over HTTP or gRPC.",
        )
    )
    simulate.add_arguments(
        commands.add_parser(
            "simulate",
            help=command_help("simulate"),
            description="Simulate a fleet in virtual time with the real routing profiles.",
        )
    )
