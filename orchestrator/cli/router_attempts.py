"""The router's per-attempt flags: first-byte and stall timeouts, mid-stream migrations.

Generated from the `router.attempts` section's fields (`config/attempts.py`).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING

from orchestrator.config.attempts import AttemptsSpec
from orchestrator.config.flags import add_flags as add_model_flags
from orchestrator.config.flags import from_args

if TYPE_CHECKING:
    from orchestrator.router_service import RouterSettings


def add_flags(router: argparse.ArgumentParser) -> None:
    """Add the attempt-timeout and migration flags to `orchestrator router`."""
    add_model_flags(router, AttemptsSpec)


def with_attempts(settings: RouterSettings, args: argparse.Namespace) -> RouterSettings:
    """`settings` with these flags' bounds (a 0 s timeout: no bound)."""
    attempts = from_args(AttemptsSpec, args)
    return dataclasses.replace(
        settings,
        first_byte_timeout_s=attempts.first_byte_timeout_s or None,
        stall_timeout_s=attempts.stall_timeout_s or None,
        migration_attempts=attempts.migrations,
    )
