"""Sum of the parts: the fleet against each of its pools run alone, same replicas, same profile.

    efficiency = fleet tokens/s ÷ Σ (pool alone tokens/s)

Each pool alone keeps the priors its replicas had in the fleet, so a wrong prior is as wrong in
the parts as in the whole. In Offline every run (fleet or pool) gets a sample set sized to keep
it busy for the same simulated minutes (the first samples of one seeded stream): runs of equal
length carry equal start-up and drain, where one shared sample set would let a slow pool alone
spread its drain over a run five times longer than the fleet's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchestrator.bench.simulate.fleet_spec import FleetSpec
from orchestrator.bench.simulate.samples import offline_samples
from orchestrator.bench.simulate.scenarios import (
    OfflineResult,
    ServerProbe,
    ServerSearch,
    ServerSettings,
    fleet_model_rate_per_s,
    run_offline,
    search_server,
)
from orchestrator.bench.virtual_fleet import ReplicaSpec
from orchestrator.fleet.figures import capacity_prior_tokens_per_s, load_figures


@dataclass(frozen=True, slots=True)
class PartResult:
    """One run (the fleet or one pool alone): its label, tokens/s and per-pool shares."""

    label: str
    tokens_per_s: float
    pool_shares: dict[str, float]
    detail: OfflineResult | ServerSearch


@dataclass(frozen=True, slots=True)
class Efficiency:
    profile: str
    scenario: str
    fleet: PartResult
    parts: list[PartResult]

    @property
    def sum_of_parts(self) -> float:
        return sum(p.tokens_per_s for p in self.parts)

    @property
    def ratio(self) -> float:
        total = self.sum_of_parts
        return self.fleet.tokens_per_s / total if total > 0 else 0.0


def pool_specs(
    specs: Sequence[ReplicaSpec], fleet: FleetSpec
) -> list[tuple[str, list[ReplicaSpec]]]:
    """The fleet's replicas split by generation, each list labelled like `MI300X:16`."""
    return [
        (pool.label, [s for s in specs if s.generation is pool.generation]) for pool in fleet.pools
    ]


def offline_part(
    label: str, specs: Sequence[ReplicaSpec], profile: str, minutes: float, seed: int
) -> PartResult:
    samples = offline_samples(offline_samples_for(specs, minutes), seed)
    result = run_offline(specs, profile, samples)
    return PartResult(label, result.tokens_per_s, result.pool_shares, result)


def server_part(
    label: str,
    specs: Sequence[ReplicaSpec],
    profile: str,
    settings: ServerSettings,
    on_probe: Callable[[ServerProbe], None] | None = None,
) -> PartResult:
    search = search_server(
        specs, profile, settings, start_rate_per_s=fleet_model_rate_per_s(specs), on_probe=on_probe
    )
    shares = search.best.pool_shares if search.best is not None else {}
    return PartResult(label, search.tokens_per_s, shares, search)


def offline_samples_for(specs: Sequence[ReplicaSpec], minutes: float) -> int:
    """Samples that keep the fleet busy about `minutes` (sized on the fleet model's figures)."""
    figures = load_figures()
    tokens_per_s = sum(capacity_prior_tokens_per_s(figures, s.generation) for s in specs)
    return max(1, round(tokens_per_s * minutes * 60.0 / figures.workload.mean_output_tokens))
