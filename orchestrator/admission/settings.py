"""How admission behaves: queue bound and timeout, priority handling, the off switch."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.routing.context import Priority

DEFAULT_MAX_QUEUE = 1024
DEFAULT_QUEUE_TIMEOUT_S = 1.0
DEFAULT_BATCH_RESERVE = 0.1
DEFAULT_CAPACITY_FACTOR = 1.0


@dataclass(frozen=True, slots=True)
class AdmissionSettings:
    """`enabled` False admits everything at once (the dispatcher alone decides, as before).

    A request is admitted while the streams in progress stay below the fleet's estimated
    concurrent capacity times `capacity_factor`; otherwise it waits in a queue of at most
    `max_queue` requests for up to `queue_timeout_s` (real-time seconds, stretched by the
    router's latency scale like the latency targets). Batch requests are admitted only below
    `1 - batch_reserve` of the capacity, so interactive ones find room first, and a queued
    batch request is the one refused when an interactive request finds the queue full.
    `default_priority` is the class of a request that names none.
    """

    enabled: bool = True
    max_queue: int = DEFAULT_MAX_QUEUE
    queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S
    batch_reserve: float = DEFAULT_BATCH_RESERVE
    capacity_factor: float = DEFAULT_CAPACITY_FACTOR
    default_priority: Priority = Priority.INTERACTIVE

    def __post_init__(self) -> None:
        if self.max_queue < 0:
            raise _invalid("max_queue", f"must be >= 0, got {self.max_queue}")
        if not self.queue_timeout_s >= 0:
            raise _invalid("queue_timeout_s", f"must be >= 0, got {self.queue_timeout_s}")
        if not 0.0 <= self.batch_reserve < 1.0:
            raise _invalid("batch_reserve", f"must be in [0, 1), got {self.batch_reserve}")
        if not self.capacity_factor > 0:
            raise _invalid("capacity_factor", f"must be > 0, got {self.capacity_factor}")


def _invalid(name: str, problem: str) -> OrchestratorError:
    return OrchestratorError(ErrorCode.INVALID_ARGUMENT, f"{name} {problem}", param=name)
