"""Command families that live in modules of their own, imported only when their command runs.

`orchestrator status` then never imports the benchmarks, and a family whose optional extra is
missing costs nothing until it is asked for. Each family module has `add_commands(commands)`; the
table below holds the top-level command names and help each one registers, so `--help` lists
them without importing anything.
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class CommandFamily:
    """A module of commands: `module` registers each name of `commands` (name -> one-line help)."""

    module: str
    commands: dict[str, str]


FAMILIES: Final = (
    CommandFamily(
        "orchestrator.cli.exporter",
        {"exporter": "serve a node's RoCE NIC and HBM metrics from sysfs on /metrics"},
    ),
    CommandFamily(
        "orchestrator.cli.fault",
        {"fault": "inject or clear faults in the simulated fabric of `orchestrator up`"},
    ),
    CommandFamily(
        "orchestrator.cli.bench",
        {
            "bench": "benchmarks (MLCommons LoadGen)",
            "simulate": (
                "virtual-time fleet simulation: Offline/Server tokens/s per routing profile"
            ),
        },
    ),
    CommandFamily(
        "orchestrator.cli.plan",
        {
            "plan": (
                "capacity plan: the cheapest (or lowest-power) GPU mix that meets a demand and SLO"
            )
        },
    ),
)


def command_help(name: str) -> str:
    """The one-line help of top-level command `name`, as `orchestrator --help` lists it."""
    for family in FAMILIES:
        if name in family.commands:
            return family.commands[name]
    raise KeyError(name)


def add_families(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    wanted: str | None,
    *,
    every: bool,
) -> None:
    """Register every family: in full the one that owns command `wanted` (all of them with
    `every`), the others as names with their help, which is all `orchestrator --help` shows."""
    for family in FAMILIES:
        if every or wanted in family.commands:
            importlib.import_module(family.module).add_commands(commands)
        else:
            for name, text in family.commands.items():
                commands.add_parser(name, help=text, description=text)
