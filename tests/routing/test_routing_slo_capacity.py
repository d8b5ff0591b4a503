"""Capacity against the request's own target: a replica takes work up to the batch at which it
still meets that class's TPOT, and loose-target work goes where it does not slow tight work."""

from __future__ import annotations

import pytest
from routing_fleet import TARGET_TPOT_S, candidate, replica

from orchestrator.core.generations import Generation
from orchestrator.core.records import ReplicaLoad
from orchestrator.routing.estimator import CapacityEstimator
from orchestrator.routing.signals import utilisations
from orchestrator.routing.stats import SLO_HEADROOM, ReplicaStats


def stats(fixed_s: float, per_sequence_s: float) -> ReplicaStats:
    """A replica whose step is `fixed_s` + `per_sequence_s` × batch (wall seconds)."""
    return ReplicaStats(
        10_000.0,
        reference_tpot_s=TARGET_TPOT_S,
        step_fixed_s=fixed_s,
        step_per_sequence_s=per_sequence_s,
    )


def test_at_the_reference_target_concurrency_is_capacity_times_tpot() -> None:
    assert stats(0.03, 0.001).concurrency_capacity(TARGET_TPOT_S) == pytest.approx(800)


def test_a_replica_with_a_heavy_weight_read_holds_only_a_small_batch_within_a_tight_target() -> (
    None
):
    heavy, light = stats(0.040, 0.0005), stats(0.010, 0.0005)
    tight, loose = 0.045, 0.2
    assert heavy.concurrency_capacity(tight) == pytest.approx(
        (SLO_HEADROOM * tight - 0.040) / 0.0005
    )
    assert light.concurrency_capacity(tight) == pytest.approx(
        (SLO_HEADROOM * tight - 0.010) / 0.0005
    )
    assert heavy.concurrency_capacity(tight) < light.concurrency_capacity(tight) / 5
    # a target inside the weight read leaves one sequence; a loose one a large batch
    assert heavy.concurrency_capacity(0.040) == 1.0
    assert heavy.concurrency_capacity(loose) > 10 * heavy.concurrency_capacity(tight)


def test_a_measured_step_anchors_the_batch_that_still_meets_the_target() -> None:
    replica_stats = stats(0.010, 0.0005)
    replica_stats.measured_batch, replica_stats.measured_step_s = 40.0, 0.035
    # within the target at 40: room for (0.95 × 0.045 − 0.035) / 0.0005 more sequences
    assert replica_stats.concurrency_capacity(0.045) == pytest.approx(
        40 + (SLO_HEADROOM * 0.045 - 0.035) / 0.0005
    )
    # over a tighter target at 40: fewer than it runs now
    assert replica_stats.concurrency_capacity(0.03) < 40
    replica_stats.batch_limit = 50.0
    assert replica_stats.concurrency_capacity(0.2) == 50.0  # never past the engine's limit


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


def learned_concurrency(batch: int, step_s: float, target_s: float) -> float:
    """Concurrency within `target_s` after a minute of scrapes of a replica running `batch`
    sequences with `step_s` steps (8 prompt tokens per output token), from the MLPerf prior."""
    replica_stats = ReplicaStats(5_000.0, reference_tpot_s=TARGET_TPOT_S)
    estimator = CapacityEstimator(
        target_ttft_s=3.0, target_tpot_s=TARGET_TPOT_S, load_tpot_s=target_s
    )
    generated = 0.0
    for second in range(1, 61):
        generated += batch / step_s
        load = ReplicaLoad(batch, 0, 0.1, generated * 8, generated)
        estimator.update("r", replica_stats, load, float(second))
    return replica_stats.concurrency_capacity(target_s)


def test_a_replica_over_a_tight_target_is_cut_to_one_sequence_and_one_within_it_grows() -> None:
    assert learned_concurrency(10, 0.030, 0.014) == 1.0
    assert learned_concurrency(60, 0.011, 0.014) > 60
