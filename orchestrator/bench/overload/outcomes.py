"""What each request of an overload run got, and the run's figures from them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from orchestrator.bench.overload.fleet import LoadSpec, UniformFleet


@dataclass(slots=True)
class Outcome:
    priority: str
    sent_s: float = 0.0  # since the load began
    max_tokens: int = 0
    status: int = 0  # 0: no answer (connection failed or cancelled)
    answered_s: float = math.nan  # seconds to the response head
    ttft_s: float | None = None
    tokens: int = 0
    error_event: bool = False
    finished: bool = False
    retry_after: str | None = None
    failure: str | None = None  # the client's exception, when there was no whole answer


@dataclass(slots=True)
class RunResult:
    name: str
    fleet: UniformFleet
    load: LoadSpec
    wall_s: float
    outcomes: list[Outcome]
    rss_mib: list[tuple[float, float]] = field(default_factory=list)

    def of(self, priority: str | None = None) -> list[Outcome]:
        return [o for o in self.outcomes if priority is None or o.priority == priority]

    def admitted(self, priority: str | None = None) -> list[Outcome]:
        return [o for o in self.of(priority) if o.status == 200]

    def refused(self, priority: str | None = None) -> list[Outcome]:
        return [o for o in self.of(priority) if o.status == 429]

    def good(self, priority: str | None = None) -> list[Outcome]:
        target = self.fleet.target_ttft_s
        return [
            o
            for o in self.admitted(priority)
            if o.finished
            and not o.error_event
            and o.ttft_s is not None
            and o.ttft_s <= target
            and o.tokens >= o.max_tokens
        ]

    def ttft_p99_s(self, priority: str | None = None) -> float:
        return percentile([o.ttft_s for o in self.admitted(priority) if o.ttft_s is not None], 99)

    def refused_ms(self, q: float, priority: str | None = None) -> float:
        return 1000 * percentile([o.answered_s for o in self.refused(priority)], q)

    @property
    def goodput_tokens(self) -> float:
        return sum(o.tokens for o in self.good()) / self.wall_s

    @property
    def goodput_share(self) -> float:
        return self.goodput_tokens / self.fleet.capacity_tokens

    def rss_at(self, share: float) -> float:
        if not self.rss_mib:
            return math.nan
        end_s = self.rss_mib[-1][0]
        return next(rss for at_s, rss in self.rss_mib if at_s >= share * end_s)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (nearest rank) of `values`; NaN when there are none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]
