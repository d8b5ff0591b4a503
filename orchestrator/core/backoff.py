"""Reconnect delays: exponential growth with full jitter, reset once a connection works.

Every reconnect loop of ours (the pod watch, the health reporter, the routing-table watch) waits
this way, so a restarted API server or control plane is not met by all its clients in the same
instant, and a long outage costs few attempts. Full jitter: each delay is uniform between 0 and
the current ceiling, which doubles per failure up to `max_s` (the AWS architecture blog's
"Exponential Backoff And Jitter" compares the variants).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(slots=True)
class Backoff:
    """Delays for consecutive failures; `first_s` is the ceiling of the first one (> 0)."""

    first_s: float
    max_s: float
    multiplier: float = 2.0
    rng: random.Random = field(default_factory=random.Random)
    _failures: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.first_s <= self.max_s or self.multiplier < 1:
            raise ValueError(
                f"backoff needs 0 < first_s <= max_s and multiplier >= 1, got {self.first_s}, "
                f"{self.max_s}, {self.multiplier}"
            )

    @property
    def ceiling_s(self) -> float:
        """The largest the next delay can be."""
        return float(min(self.max_s, self.first_s * self.multiplier**self._failures))

    def next_delay_s(self) -> float:
        """The delay before the next attempt, after one more failure."""
        delay = self.rng.uniform(0.0, self.ceiling_s)
        self._failures += 1
        return delay

    def reset(self) -> None:
        """A connection worked: the next failure starts from `first_s` again."""
        self._failures = 0
