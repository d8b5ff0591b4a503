"""The router's time flags: per attempt (first-byte and stall timeouts, mid-stream migrations)
and as a whole (deadline, connect timeout, scrape interval, load-report age).

Generated from the `router.attempts` and `router.timing` sections' fields (`config/attempts.py`,
`config/router_timing.py`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from orchestrator.config.attempts import AttemptsSpec
from orchestrator.config.flags import add_flags as add_model_flags
from orchestrator.config.flags import from_args
from orchestrator.config.router_timing import RouterTimingSpec

if TYPE_CHECKING:
    from orchestrator.router_service import RouterSettings


def add_flags(router: argparse.ArgumentParser) -> None:
    """Add the attempt-timeout, migration and timing flags to `orchestrator router`."""
    add_model_flags(router, AttemptsSpec)
    add_model_flags(router, RouterTimingSpec)


def timing(args: argparse.Namespace) -> RouterTimingSpec:
    return from_args(RouterTimingSpec, args)


def with_attempts(settings: RouterSettings, args: argparse.Namespace) -> RouterSettings:
    """`settings` with these flags' bounds (a 0 s timeout: no bound)."""
    attempts = from_args(AttemptsSpec, args)
    return settings.model_copy(
        update={
            "first_byte_timeout_s": attempts.first_byte_timeout_s or None,
            "stall_timeout_s": attempts.stall_timeout_s or None,
            "migration_attempts": attempts.migrations,
        }
    )
