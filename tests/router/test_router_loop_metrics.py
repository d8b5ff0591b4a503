"""The router's lock-free families (`forwarding/loop_metrics.py`) expose exactly what
prometheus_client's own Counter and Histogram expose for the same updates, less `_created`."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from orchestrator.forwarding.loop_metrics import CounterFamily, HistogramFamily

BUCKETS = (0.005, 0.01, 0.1, 1.0, 2.5, 10.0)
# on a bound, between bounds, below the first, above the last, zero, and a repeat
VALUES = (0.005, 0.0075, 0.001, 11.0, 0.0, 1.0, 1.0, 2.5, 0.25)


def exposition(registry: CollectorRegistry) -> list[str]:
    lines = generate_latest(registry).decode().splitlines()
    return [line for line in lines if "_created" not in line]


def test_a_histogram_family_exposes_what_prometheus_client_s_histogram_does() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    mine = HistogramFamily("x_seconds", "Doc.", ["pool"], buckets=BUCKETS, registry=ours)
    reference = Histogram("x_seconds", "Doc.", ["pool"], buckets=BUCKETS, registry=theirs)
    for index, value in enumerate(VALUES):
        pool = "a" if index % 3 else "b"
        mine.labels(pool).observe(value)
        reference.labels(pool).observe(value)

    assert exposition(ours) == exposition(theirs)
    assert ours.get_sample_value("x_seconds_bucket", {"pool": "a", "le": "0.005"}) == 2.0
    assert ours.get_sample_value("x_seconds_count", {"pool": "b"}) == 3.0


def test_a_counter_family_exposes_what_prometheus_client_s_counter_does() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    mine = CounterFamily("y_total", "Doc.", ["code"], registry=ours)
    reference = Counter("y_total", "Doc.", ["code"], registry=theirs)
    plain = CounterFamily("z_total", "Doc.", registry=ours)
    plain_reference = Counter("z_total", "Doc.", registry=theirs)
    for code, amount in (("200", 1.0), ("429", 2.0), ("200", 0.5)):
        mine.labels(code).inc(amount)
        reference.labels(code).inc(amount)
    plain.inc()
    plain_reference.inc()

    assert exposition(ours) == exposition(theirs)
    assert ours.get_sample_value("y_total", {"code": "200"}) == 1.5


def test_wrong_label_counts_negative_increments_and_bad_buckets_are_refused() -> None:
    registry = CollectorRegistry()
    counter = CounterFamily("c_total", "Doc.", ["a", "b"], registry=registry)
    with pytest.raises(ValueError, match="expected 2 label values"):
        counter.labels("only-one")
    with pytest.raises(ValueError, match="only goes up"):
        counter.labels("x", "y").inc(-1.0)
    with pytest.raises(ValueError, match="distinct and increasing"):
        HistogramFamily("h", "Doc.", buckets=(1.0, 0.5), registry=registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        CounterFamily("c_total", "Doc.", ["a", "b"], registry=registry)


def test_a_nan_observation_lands_in_no_bucket_as_prometheus_client_s_does() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    mine = HistogramFamily("n_seconds", "Doc.", buckets=BUCKETS, registry=ours)
    reference = Histogram("n_seconds", "Doc.", buckets=BUCKETS, registry=theirs)
    for value in (0.5, float("nan")):
        mine.observe(value)
        reference.observe(value)

    assert exposition(ours) == exposition(theirs)
    assert ours.get_sample_value("n_seconds_count") == 1.0
