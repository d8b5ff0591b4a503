"""Command family: fault injection into the simulated fabric."""

from __future__ import annotations

import argparse


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register this family's subcommands on the top-level parser."""
