"""Capacity against the request's own target: a replica takes work up to the batch at which it
still meets that class's TPOT, and loose-target work goes where it does not slow tight work."""

from __future__ import annotations

import pytest
from routing_fleet import TARGET_TPOT_S, candidate, replica

from orchestrator.core.generations import Generation
from orchestrator.routing.signals import utilisations
from orchestrator.routing.stats import HEADROOM, ReplicaStats


def stats(capacity: float, fixed_share: float) -> ReplicaStats:
    """A replica whose weight read takes `fixed_share` of the reference step target."""
    return ReplicaStats(
        capacity,
        reference_tpot_s=TARGET_TPOT_S,
        step_fixed_s=fixed_share * HEADROOM * TARGET_TPOT_S,
    )


def test_at_the_reference_target_concurrency_is_capacity_times_tpot() -> None:
    assert stats(10_000, 0.5).concurrency_capacity(TARGET_TPOT_S) == pytest.approx(800)


def test_a_replica_with_a_heavy_weight_read_holds_only_a_small_batch_within_a_tight_target() -> (
    None
):
    heavy, light = stats(10_000, 0.6), stats(10_000, 0.1)
    tight = 0.6 * TARGET_TPOT_S
    # the same capacity at the reference target, but the heavy one's batch shrinks far more
    assert heavy.concurrency_capacity(tight) == 1.0  # its weight read eats the whole target
    assert light.concurrency_capacity(tight) == pytest.approx(800 * (0.6 - 0.1) / 0.9)
    # and within a loose target both grow past proportion
    loose = 2 * TARGET_TPOT_S
    assert heavy.concurrency_capacity(loose) == pytest.approx(800 * (2 - 0.6) / 0.4)
    assert heavy.concurrency_capacity(loose) > 2 * heavy.concurrency_capacity(TARGET_TPOT_S)


def test_the_tightest_target_in_flight_binds_the_whole_batch() -> None:
    replica_stats = stats(10_000, 0.1)
    replica_stats.count_in(0.04)
    replica_stats.count_in(0.2)
    assert replica_stats.binding_tpot_s(0.2) == 0.04
    replica_stats.count_out(0.04)
    assert replica_stats.binding_tpot_s(0.2) == 0.2
    replica_stats.count_out(0.2)
    assert replica_stats.in_flight_by_tpot == {}


def test_loose_target_work_avoids_a_replica_running_tight_target_work() -> None:
    fast = candidate(replica("fast", Generation.MI355X))
    slow = candidate(replica("slow", Generation.MI300X))
    for _ in range(5):
        fast.stats.count_in(0.03)
        fast.stats.in_flight += 1
    for _ in range(5):
        slow.stats.count_in(0.3)
        slow.stats.in_flight += 1
    fast_rho, slow_rho = utilisations([fast, slow], 0.3)
    # a batch-class request sees the fast replica bound by the interactive requests on it
    assert fast_rho > slow_rho
