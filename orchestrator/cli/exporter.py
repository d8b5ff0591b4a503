"""Command family: the node exporter (RoCE NIC and HBM metrics)."""

from __future__ import annotations

import argparse


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register this family's subcommands on the top-level parser."""
