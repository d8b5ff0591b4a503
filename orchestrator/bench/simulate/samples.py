"""Request streams for the scenarios, deterministic per seed.

Server arrivals use common random numbers: one stream of unit-rate Poisson gaps and token lengths
per seed, with times divided by the rate. Two probes at different rates then see the same
requests in the same order, only closer together, so "passes at this rate" changes with the rate
and not with the luck of the draw, and a search over the rate converges.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from orchestrator.bench.virtual_fleet import Arrival
from orchestrator.fleet.workload import WorkloadSampler


@dataclass(slots=True)
class UnitStream:
    """Unit-rate Poisson arrivals with workload lengths, grown on demand."""

    seed: int
    _times: list[float] = field(default_factory=list)
    _lengths: list[tuple[int, int]] = field(default_factory=list)
    _gaps: random.Random = field(init=False)
    _sampler: WorkloadSampler = field(init=False)

    def __post_init__(self) -> None:
        self._gaps = random.Random(self.seed * 7919 + 1)
        self._sampler = WorkloadSampler(seed=self.seed)

    def _grow(self, unit_time: float) -> None:
        now = self._times[-1] if self._times else 0.0
        while now <= unit_time:
            now += self._gaps.expovariate(1.0)
            sample = self._sampler.draw()
            self._times.append(now)
            self._lengths.append((sample.input_tokens, sample.output_tokens))

    def arrivals(self, rate_per_s: float, duration_s: float) -> list[Arrival]:
        """Arrivals at `rate_per_s` over [0, duration_s]."""
        if rate_per_s <= 0:
            raise ValueError(f"rate must be > 0, got {rate_per_s}")
        horizon = rate_per_s * duration_s
        self._grow(horizon)
        out = []
        for unit, (prompt, output) in zip(self._times, self._lengths, strict=True):
            if unit > horizon:
                break
            out.append(Arrival(unit / rate_per_s, prompt, output))
        return out


def stream_arrivals(seed: int, rate_per_s: float, duration_s: float) -> Iterator[Arrival]:
    """`UnitStream(seed).arrivals(rate_per_s, duration_s)`, drawn as it is read and kept nowhere.

    For one long run (memory stays flat with the simulated time); a search that replays the
    stream at several rates keeps a `UnitStream`.
    """
    if rate_per_s <= 0:
        raise ValueError(f"rate must be > 0, got {rate_per_s}")
    gaps = random.Random(seed * 7919 + 1)
    sampler = WorkloadSampler(seed=seed)
    horizon = rate_per_s * duration_s
    unit = 0.0
    while True:
        unit += gaps.expovariate(1.0)
        if unit > horizon:
            return
        sample = sampler.draw()
        yield Arrival(unit / rate_per_s, sample.input_tokens, sample.output_tokens)


def offline_samples(count: int, seed: int) -> list[Arrival]:
    """`count` samples, longest output first, all issued at time 0.

    An Offline harness is free to order its queries; issuing the long ones first keeps the end of
    the run from waiting on one straggler, as length-sorting MLPerf Offline SUTs do.
    """
    if count < 1:
        raise ValueError(f"need at least one sample, got {count}")
    sampler = WorkloadSampler(seed=seed)
    drawn = sampler.draw_many(count)
    drawn.sort(key=lambda s: (-s.output_tokens, -s.input_tokens))
    return [Arrival(0.0, s.input_tokens, s.output_tokens) for s in drawn]
