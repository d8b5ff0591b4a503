"""The router's per-attempt flags: first-byte and stall timeouts, mid-stream migrations."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING

from orchestrator.core.arg_types import non_negative_float as _timeout
from orchestrator.core.arg_types import non_negative_int as _non_negative_int
from orchestrator.forwarding.dispatch_settings import (
    DEFAULT_FIRST_BYTE_TIMEOUT_S,
    DEFAULT_MIGRATION_ATTEMPTS,
    DEFAULT_STALL_TIMEOUT_S,
)

if TYPE_CHECKING:
    from orchestrator.router_service import RouterSettings


def add_flags(router: argparse.ArgumentParser) -> None:
    """Add the attempt-timeout and migration flags to `orchestrator router`."""
    router.add_argument(
        "--first-byte-timeout", type=_timeout, default=DEFAULT_FIRST_BYTE_TIMEOUT_S,
        help="seconds a replica may take to send a stream's first bytes before the request is"
        " retried on another, times --latency-scale; 0: only the deadline bounds it"
        f" (default {DEFAULT_FIRST_BYTE_TIMEOUT_S:g})",
    )  # fmt: skip
    router.add_argument(
        "--stall-timeout", type=_timeout, default=DEFAULT_STALL_TIMEOUT_S,
        help="longest gap between a stream's chunks before it moves to another replica, times"
        f" --latency-scale; 0: no bound (default {DEFAULT_STALL_TIMEOUT_S:g})",
    )  # fmt: skip
    router.add_argument(
        "--migration-attempts", type=_non_negative_int, default=DEFAULT_MIGRATION_ATTEMPTS,
        help="replicas tried, at most, to continue a stream whose replica fails, stalls or"
        f" drains mid-stream; 0: never (default {DEFAULT_MIGRATION_ATTEMPTS})",
    )  # fmt: skip


def with_attempts(settings: RouterSettings, args: argparse.Namespace) -> RouterSettings:
    """`settings` with these flags' bounds (a 0 s timeout: no bound)."""
    return dataclasses.replace(
        settings,
        first_byte_timeout_s=args.first_byte_timeout or None,
        stall_timeout_s=args.stall_timeout or None,
        migration_attempts=args.migration_attempts,
    )
