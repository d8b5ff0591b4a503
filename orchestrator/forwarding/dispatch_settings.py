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
    over all its moves.
    """

    slo: SloTargets
    connect_timeout_s: float = 2.0
    first_byte_timeout_s: float | None = DEFAULT_FIRST_BYTE_TIMEOUT_S
    stall_timeout_s: float | None = DEFAULT_STALL_TIMEOUT_S
    migration_attempts: int = DEFAULT_MIGRATION_ATTEMPTS

    def __post_init__(self) -> None:
        for name in ("first_byte_timeout_s", "stall_timeout_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0 (or None), got {value}")
        if self.migration_attempts < 0:
            raise ValueError(f"migration_attempts must be >= 0, got {self.migration_attempts}")
