"""An injectable clock, so that policies and models run on wall time or virtual time alike."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Seconds on a monotonic scale; only differences are meaningful."""

    def now(self) -> float: ...


class MonotonicClock:
    """Wall time from `time.monotonic`."""

    def now(self) -> float:
        return time.monotonic()


class ManualClock:
    """Time that moves only when told: the virtual-time simulation and tests drive it."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now = start_s

    def now(self) -> float:
        return self._now

    def advance(self, delta_s: float) -> None:
        if delta_s < 0:
            raise ValueError(f"time cannot go backwards (delta_s={delta_s})")
        self._now += delta_s

    def set(self, now_s: float) -> None:
        if now_s < self._now:
            raise ValueError(f"time cannot go backwards ({now_s} < {self._now})")
        self._now = now_s
