"""How far one attempt at a request may go before the dispatcher moves it on, and the latency
targets it is judged by: the dispatcher's settings, apart so that settings and flags can name
them without the dispatcher."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.config.attempts import (
    DEFAULT_FIRST_BYTE_TIMEOUT_S,
    DEFAULT_MIGRATION_ATTEMPTS,
    DEFAULT_STALL_TIMEOUT_S,
)
from orchestrator.config.router_timing import DEFAULT_CONNECT_TIMEOUT_S
from orchestrator.core.slo import SloTargets

__all__ = [
    "DEFAULT_FIRST_BYTE_TIMEOUT_S",
    "DEFAULT_MIGRATION_ATTEMPTS",
    "DEFAULT_STALL_TIMEOUT_S",
    "DispatchSettings",
]


@dataclass(frozen=True, slots=True)
class DispatchSettings:
    """Latency targets per model and class (wall seconds) and the bounds of one attempt.

    `connect_timeout_s` bounds opening a connection; `first_byte_timeout_s` a stream's first
    bytes (a non-streamed answer's first byte comes with its last, so only the deadline bounds
    it); `stall_timeout_s` the longest gap between a stream's chunks. None: no bound but the
    deadline. `migration_attempts` caps the replicas tried to continue one stream (0: never),
    over all its moves. Built from the router's settings, which check every value.
    """

    slo: SloTargets
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    first_byte_timeout_s: float | None = DEFAULT_FIRST_BYTE_TIMEOUT_S
    stall_timeout_s: float | None = DEFAULT_STALL_TIMEOUT_S
    migration_attempts: int = DEFAULT_MIGRATION_ATTEMPTS
