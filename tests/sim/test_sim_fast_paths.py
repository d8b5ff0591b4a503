"""The virtual fleet's fast paths change nothing: same steps, same draws, same requests."""

from __future__ import annotations

import random

import pytest

from orchestrator.bench.simulate.samples import UnitStream, stream_arrivals
from orchestrator.fleet.step_cost import StepCostModel
from orchestrator.fleet.workload import WorkloadSampler
from orchestrator.routing.sampling import sample
from orchestrator.sim.batcher import SimBatcher
from orchestrator.sim.sequences import SimRequest


def _requests(seed: int, count: int, rate_per_s: float) -> list[SimRequest]:
    rng = random.Random(seed)
    sampler = WorkloadSampler(seed=seed)
    now, out = 0.0, []
    for _ in range(count):
        now += rng.expovariate(rate_per_s)
        drawn = sampler.draw()
        out.append(SimRequest(drawn.input_tokens, drawn.output_tokens, now))
    return out


def _serve(batcher: SimBatcher, requests: list[SimRequest], *, fast: bool) -> list[int]:
    """Drive one batcher through `requests`; the step count at which each event happened."""
    events: list[int] = []
    now, index = 0.0, 0
    while index < len(requests) or batcher.has_work:
        while index < len(requests) and requests[index].arrival_s <= now:
            batcher.submit(requests[index])
            index += 1
        if not batcher.has_work:
            now = requests[index].arrival_s
            continue
        if not fast:
            now += batcher.plan_step().duration_s
            outcome = batcher.finish_step(now)
            events.append(len(outcome.finished))
            continue
        now += batcher.plan_duration_s()
        if batcher.planned_decode_only_sequences:
            events.append(len(batcher.finish_decode_step(now) or ()))
        else:
            events.append(len(batcher.finish_step(now).finished))
    return events


@pytest.mark.parametrize("kv_capacity_tokens", [None, 400_000])  # the small one preempts
def test_decode_fast_path_times_every_token_as_the_full_step_does(
    kv_capacity_tokens: int | None,
) -> None:
    cost = StepCostModel.for_generation("MI300X")
    slow_requests = _requests(7, 400, 4.0)
    fast_requests = _requests(7, 400, 4.0)
    slow = SimBatcher(cost, kv_capacity_tokens=kv_capacity_tokens)
    fast = SimBatcher(cost, kv_capacity_tokens=kv_capacity_tokens)
    assert _serve(slow, slow_requests, fast=False) == _serve(fast, fast_requests, fast=True)
    stamps = [(r.first_token_s, r.finish_s, r.preemptions) for r in slow_requests]
    assert stamps == [(r.first_token_s, r.finish_s, r.preemptions) for r in fast_requests]
    assert all(r.finish_s is not None for r in fast_requests)
    if kv_capacity_tokens is not None:
        assert sum(r.preemptions for r in fast_requests) > 0


def test_a_decode_only_step_cannot_be_planned_twice() -> None:
    batcher = SimBatcher(StepCostModel.for_generation("MI355X"))
    batcher.submit(SimRequest(10, 5))
    batcher.plan_step()
    batcher.finish_step(0.1)
    assert batcher.plan_duration_s() > 0
    assert batcher.planned_decode_only_sequences == 1
    with pytest.raises(RuntimeError):
        batcher.plan_step()
    with pytest.raises(RuntimeError):
        batcher.plan_duration_s()


@pytest.mark.parametrize("size", [1, 8, 30, 85, 86, 512, 2000])
def test_candidate_sample_draws_exactly_what_random_sample_draws(size: int) -> None:
    population = tuple(range(size))
    ours, reference = random.Random(size), random.Random(size)
    for k in (1, 2, 8, min(size, 10)):
        if k > size:
            continue
        for _ in range(300):
            assert sample(ours, population, k) == reference.sample(population, k)
    assert ours.random() == reference.random()  # both generators are in the same state


def test_streamed_arrivals_are_the_unit_stream_read_lazily() -> None:
    assert list(stream_arrivals(3, 40.0, 20.0)) == UnitStream(3).arrivals(40.0, 20.0)
    with pytest.raises(ValueError):
        next(stream_arrivals(3, 0.0, 20.0))
