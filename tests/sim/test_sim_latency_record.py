"""The bounded latency record: nearest-rank percentiles within 0.05% of the exact ones, exact at
the extremes, memory bounded by the range the values span rather than by how many come."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.sim.latency_record import LatencyRecord
from orchestrator.sim.virtual import percentile

latencies = st.lists(
    st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_infinity=False),
    min_size=1, max_size=400,
)  # fmt: skip


@given(latencies, st.sampled_from([0, 1, 25, 50, 90, 99, 99.9, 100]))
def test_a_percentile_is_the_exact_nearest_rank_within_half_a_bucket(
    values: list[float], q: float
) -> None:
    exact = percentile(values, q)
    assert LatencyRecord.of(values).percentile(q) == pytest.approx(exact, rel=5e-4, abs=1e-300)


def test_the_extremes_are_exact_and_an_empty_record_says_nan() -> None:
    values = [0.123456789, 3.3, 2.2, 7.77777]
    record = LatencyRecord.of(values)
    assert record.percentile(0) == 0.123456789 and record.percentile(100) == 7.77777
    assert math.isnan(LatencyRecord().percentile(50))


def test_requests_that_never_got_a_latency_count_as_infinite() -> None:
    record = LatencyRecord.of([0.5] * 98)
    record.add_times(math.inf, 2)
    assert len(record) == 100
    assert record.percentile(98) == pytest.approx(0.5, rel=5e-4)
    assert record.percentile(99) == math.inf
    record.add_times(math.inf, 0)
    assert len(record) == 100


@pytest.mark.parametrize("bad", [-0.001, math.nan])
def test_a_negative_or_nan_latency_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="at least 0"):
        LatencyRecord().add(bad)


def test_memory_is_bounded_by_the_range_not_the_count() -> None:
    rng = random.Random(7)
    record = LatencyRecord()
    for _ in range(200_000):
        record.add(rng.uniform(0.010, 0.160))  # four powers of two: at most 4 x 1024 buckets
    assert record.count == 200_000
    assert record.buckets() <= 4 * 1024 + 1


def test_a_copy_is_independent_and_digests_tell_records_apart() -> None:
    record = LatencyRecord.of([0.1, 0.2, 0.3])
    twin = record.copy()
    assert twin.digest() == record.digest()
    twin.add(0.4)
    assert twin.digest() != record.digest() and len(record) == 3
    assert LatencyRecord.of([0.3, 0.1, 0.2]).digest() == record.digest()  # order does not count


def test_zeros_are_exact_and_a_negative_zero_is_a_zero() -> None:
    record = LatencyRecord.of([0.0, 0.0, 0.0, 1.0])
    assert record.percentile(50) == 0.0
    signed = LatencyRecord.of([-0.0] * 50 + [1.0] * 50)
    assert (
        signed.percentile(50) == 0.0
        and signed.digest() == LatencyRecord.of([0.0] * 50 + [1.0] * 50).digest()
    )


def test_values_that_differ_inside_one_bucket_digest_apart() -> None:
    near = LatencyRecord.of([1.0, 2.0, 3.0])
    nudged = LatencyRecord.of([1.0, 2.0000001, 3.0])  # same bucket, same extremes
    assert near.buckets() == nudged.buckets() and near.digest() != nudged.digest()
    many = LatencyRecord.of([0.5])
    many.add_times(0.25, 3)
    assert many.digest() == LatencyRecord.of([0.25, 0.5, 0.25, 0.25]).digest()
