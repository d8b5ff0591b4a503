"""Learns instead of being told: the router's own profile and estimator, over simulated replicas
in virtual time, find the MI355X : MI300X capacity ratio from a prior that says they are equal."""

from __future__ import annotations

import random

import pytest

from orchestrator.bench.virtual_fleet import (
    CapacitySample,
    ReplicaSpec,
    VirtualFleet,
    poisson_arrivals,
)
from orchestrator.core.generations import Generation
from orchestrator.fleet.figures import capacity_prior_tokens_per_s, load_figures
from orchestrator.fleet.workload import WorkloadSampler
from orchestrator.routing.profiles import builtin_profiles
from orchestrator.sim.virtual import percentile

FLEET = (Generation.MI355X, Generation.MI355X, Generation.MI300X, Generation.MI300X)
LOAD = 0.8  # of the fleet's capacity
LEARNED_BY_S = 120.0
WATCHED_UNTIL_S = 240.0


def capacity(generation: Generation) -> float:
    return capacity_prior_tokens_per_s(load_figures(), generation)


def ratio(sample: CapacitySample) -> float:
    fast = sample.capacity_tokens_per_s["r0"] + sample.capacity_tokens_per_s["r1"]
    slow = sample.capacity_tokens_per_s["r2"] + sample.capacity_tokens_per_s["r3"]
    return fast / slow


@pytest.mark.parametrize("seed", [1, 2])
def test_from_an_all_equal_prior_the_estimator_finds_the_ratio_within_two_minutes(
    seed: int,
) -> None:
    true_ratio = capacity(Generation.MI355X) / capacity(Generation.MI300X)
    equal = sum(capacity(g) for g in FLEET) / len(FLEET)
    specs = [ReplicaSpec(f"r{i}", g, equal) for i, g in enumerate(FLEET)]
    fleet = VirtualFleet(specs, builtin_profiles()["capacity"])
    sampler = WorkloadSampler(seed=seed)
    gaps = random.Random(seed + 100)

    def lengths() -> tuple[int, int]:
        sample = sampler.draw()
        return sample.input_tokens, sample.output_tokens

    rate = LOAD * sum(capacity(g) for g in FLEET) / load_figures().workload.mean_output_tokens
    arrivals = poisson_arrivals(rate, WATCHED_UNTIL_S, lengths, gaps.expovariate)
    run = fleet.run(arrivals, until_s=WATCHED_UNTIL_S)

    curve = [(s.at_s, ratio(s)) for s in run.capacity if s.at_s % 15 == 0]
    print(f"\ntrue ratio {true_ratio:.2f}; learned (s, ratio): " + ", ".join(
        f"({at:.0f}, {value:.2f})" for at, value in curve
    ))  # fmt: skip
    after = [value for at, value in curve if at >= LEARNED_BY_S]
    # The ratio is the fleet model's at steady state; four minutes from an empty fleet run on a
    # lighter batch, where MI355X does up to ~8% better (docs/fleet-model.md), hence 0.15 + 0.05.
    assert after and all(value == pytest.approx(true_ratio, rel=0.20) for value in after)

    proportional = capacity(Generation.MI355X) / sum(capacity(g) for g in FLEET)
    for replica_id in ("r0", "r1"):
        assert run.share(replica_id) == pytest.approx(proportional, rel=0.15)
    target = load_figures().workload.server_latency_p99.ttft_s
    ttfts = [
        r.first_token_s - r.arrival_s
        for requests in run.requests.values()
        for r in requests
        if r.first_token_s is not None
    ]
    assert percentile(ttfts, 99) <= target
