"""Overload through a real router process over a time-scaled simulated replica, a short version
of `python -m orchestrator.bench.overload`: at 3x capacity the router admits some requests and
serves them whole, and refuses the rest with 429 + Retry-After quickly instead of queueing them
for ever; at 2x with half the requests batch, batch absorbs the refusals."""

from __future__ import annotations

import statistics
from collections.abc import Iterator

import pytest

from orchestrator.bench.overload.fleet import LoadSpec, UniformFleet
from orchestrator.bench.overload.load import run_once
from orchestrator.bench.overload.outcomes import RunResult
from orchestrator.bench.overload.processes import running_fleet
from orchestrator.core.generations import Generation

FLEET = UniformFleet(replicas=1, generation=Generation.MI300X, time_scale=2.0)
QUEUE_TIMEOUT_S = 1.0 * FLEET.time_scale  # the default, stretched by the latency scale
GENEROUS_S = 3.0  # slack for a loaded 2-core machine


@pytest.fixture(scope="module")
def fleet_urls() -> Iterator[list[str]]:
    with running_fleet(FLEET) as urls:
        yield urls


def assert_well_behaved(run: RunResult, *, mostly_at_once: bool) -> None:
    assert len(run.admitted()) + len(run.refused()) == len(run.outcomes), [
        (o.status, o.failure) for o in run.outcomes if o.status not in (200, 429)
    ]
    for outcome in run.admitted():
        assert outcome.finished and not outcome.error_event
        assert outcome.tokens >= outcome.max_tokens
    for outcome in run.refused():
        assert outcome.retry_after is not None and int(outcome.retry_after) >= 1
    refused_s = [o.answered_s for o in run.refused()]
    if mostly_at_once:  # with one class, what cannot be served is refused at once ...
        assert statistics.median(refused_s) < 1.0
    assert max(refused_s) < QUEUE_TIMEOUT_S + GENEROUS_S  # ... and none waits for ever


@pytest.mark.slow
def test_at_three_times_capacity_the_excess_is_refused_quickly_and_the_rest_served(
    fleet_urls: list[str],
) -> None:
    run = run_once("on", FLEET, fleet_urls, LoadSpec(load=3.0, duration_s=6.0, drain_s=60.0),
                   admission=True)  # fmt: skip
    assert run.admitted() and run.refused()
    assert_well_behaved(run, mostly_at_once=True)
    # Admission keeps the replica near its capacity: far fewer admitted than offered.
    assert len(run.admitted()) < 0.75 * len(run.outcomes)


@pytest.mark.slow
def test_under_pressure_batch_absorbs_the_refusals(fleet_urls: list[str]) -> None:
    load = LoadSpec(load=2.0, duration_s=6.0, batch_share=0.5, drain_s=60.0, seed=1)
    run = run_once("priorities", FLEET, fleet_urls, load, admission=True)
    # Batch requests may wait in the queue for room that interactive ones then take, so here a
    # refusal may come at the queue timeout; none may wait longer.
    assert_well_behaved(run, mostly_at_once=False)
    refused_share = {p: len(run.refused(p)) / max(1, len(run.of(p))) for p in ("interactive",
                                                                             "batch")}  # fmt: skip
    assert refused_share["batch"] > refused_share["interactive"], refused_share
    assert len(run.refused("batch")) > 0
