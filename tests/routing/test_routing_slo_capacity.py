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
from orchestrator.routing.step_curve import MAX_ANSWERS, STALE_AFTER, TAIL_HEADROOM, StepCurve


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


def mixture_of_experts_tpot_s(batch: float) -> float:
    """A fast replica's TPOT, steep over the first sequences and flat after (the fleet model's
    MI355X at 128 prompt / 16 output tokens, roughly): 14 ms at 147 sequences."""
    return 0.0102 + 0.0000258 * batch - 0.0072 * 0.5 ** (batch / 2)


def steady(curve: StepCurve, batch: float, tpot_s: float, requests: int = 100) -> None:
    """`requests` finished at `batch`, every one with the same TPOT."""
    for _ in range(requests):
        curve.observe(batch, tpot_s)


def test_the_tpot_measured_at_each_batch_gives_the_batch_within_a_target() -> None:
    curve = StepCurve()
    assert curve.batch_within(0.014, 1e-4) is None
    for _ in range(100):  # requests finishing at every batch in turn, each batch steady
        for batch in (2, 8, 40, 100, 200, 400, 700):
            curve.observe(batch, mixture_of_experts_tpot_s(batch))
    within = curve.batch_within(0.014, 1e-4)
    assert within is not None and within == pytest.approx(147, rel=0.02)
    # over the target at every batch measured: below the smallest, along the slope given
    assert curve.batch_within(0.005, 1e-3) == pytest.approx(
        2 - (mixture_of_experts_tpot_s(2) - 0.005) / 1e-3, abs=0.02
    )
    # within it at the largest: past it, along the slope given
    assert curve.batch_within(0.030, 1e-5) == pytest.approx(
        700 + (0.030 - mixture_of_experts_tpot_s(700)) / 1e-5, rel=0.01
    )
    curve.observe(3, 0.05)  # a slow small batch (a burst of prefills) changes nothing
    assert curve.batch_within(0.014, 1e-4) == within
    curve.observe(100, 0.030)  # one slow request where the batch was steady: its mean rises
    moved = curve.batch_within(0.014, 1e-4)
    assert moved is not None and moved < within


def test_a_bucket_no_request_revisits_is_forgotten_so_the_batch_can_grow_past_it() -> None:
    curve = StepCurve()
    curve.observe(200, 0.030)  # measured once, long ago, in a burst
    steady(curve, 100, 0.012, STALE_AFTER * 2)
    # held below 200 since: the batch now extrapolates past it from 100 (along the slope given)
    assert curve.batch_within(0.014, 1e-4) == pytest.approx(100 + 0.002 / 1e-4, rel=0.01)


def test_answers_at_slopes_the_estimator_refits_every_scrape_do_not_pile_up() -> None:
    """The memo is per slope: thousands of re-fitted slopes keep it small, and each answer
    extrapolates along the slope it was asked with."""
    curve = StepCurve()
    steady(curve, 100, 0.012)
    for index in range(5_000):
        slope = 1e-4 * (1.0 + index * 1e-4)
        assert curve.batch_within(0.014, slope) == pytest.approx(100 + 0.002 / slope)
        assert curve.batch_within(0.020, slope) == pytest.approx(100 + 0.008 / slope)
    assert len(curve._answers) <= MAX_ANSWERS
    for index in range(5_000):  # many targets at one slope: bounded too
        curve.batch_within(0.013 + index * 1e-6, 1e-4)
    assert len(curve._answers) <= MAX_ANSWERS


def test_the_measured_curve_holds_a_slow_replica_to_the_small_batch_it_meets_a_tight_one_at() -> (
    None
):
    """A slow replica measured at large loose batches (a line from there would allow dozens
    within 14 ms) and at small ones holds about 2 within it."""
    replica_stats = stats(0.030, 0.0002)
    for batch, tpot_s in ((1, 0.0079), (4, 0.020), (300, 0.074), (16, 0.030)):
        replica_stats.step_curve.observe(batch, tpot_s)
    assert replica_stats.concurrency_capacity(0.014) == pytest.approx(
        1 + (SLO_HEADROOM * 0.014 - 0.0079) / (0.020 - 0.0079) * 3
    )


def test_the_batch_seen_within_a_target_is_not_extrapolated_past_the_largest_measured() -> None:
    curve = StepCurve()
    assert curve.batch_seen_within(0.014) is None
    steady(curve, 100, 0.012)
    assert curve.batch_within(0.014, 1e-4) == pytest.approx(120)  # along the line
    assert curve.batch_seen_within(0.014) == pytest.approx(100)  # what it was seen to hold
    steady(curve, 200, 0.016)
    assert curve.batch_seen_within(0.014) == pytest.approx(curve.batch_within(0.014, 1e-4))


def test_a_batch_whose_requests_spread_widely_is_judged_by_its_tail_a_steady_one_by_its_mean() -> (
    None
):
    """The targets are p99s. Requests at 4 in flight alternating 8 and 16 ms (prefills landing
    in some decodes, not others) average 12 ms, within 0.95 × 14 ms, but half of them miss
    14 ms: that batch is not within it. At 100 in flight a spread of ±0.1 ms leaves the mean
    to decide, as before."""
    spread, steady_curve = StepCurve(), StepCurve()
    for index in range(200):
        spread.observe(4, 0.008 if index % 2 else 0.016)
        steady_curve.observe(4, 0.012)
    assert steady_curve.batch_seen_within(SLO_HEADROOM * 0.014) == pytest.approx(4)
    below = spread.batch_within(SLO_HEADROOM * 0.014, 1e-3)  # 0.95 × its tail: 9 ms over
    assert below is not None and below < 0.0  # under the smallest batch measured
    assert spread.batch_seen_within(SLO_HEADROOM * 0.030) == pytest.approx(4)  # a loose target
    large = StepCurve()
    for index in range(200):
        large.observe(100, 0.0119 if index % 2 else 0.0121)
    assert large.batch_within(SLO_HEADROOM * 0.014, 1e-4) == pytest.approx(
        100 + (SLO_HEADROOM * 0.014 - 0.012) / 1e-4, rel=0.01
    )


def test_the_tail_is_held_to_the_target_the_mean_gets_its_headroom_below() -> None:
    """The step curve cannot import `stats` (which imports it), so it states the headroom again:
    the two must agree, or the tail is held to another target than the docs say."""
    assert TAIL_HEADROOM == SLO_HEADROOM
