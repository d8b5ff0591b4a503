"""The `orchestrator` command line: argument parsing only, one module per command family
(`sim`, `router`, `stack`, `operator`, and those `families.FAMILIES` imports only for their own
command), each calling the packages when its command runs. The top layer: it may import every
package, and only what a command needs, when it runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from orchestrator.cli import operator, router, sim, stack
from orchestrator.cli.extras import missing_extra_message
from orchestrator.cli.families import add_families
from orchestrator.core.errors import OrchestratorError

EXIT_USAGE = 2


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

    sim.add_commands(commands)
    router.add_commands(commands)
    stack.add_commands(commands)
    operator.add_commands(commands)
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
