"""Virtual time: percentiles as LoadGen reports them, idle gaps jumped over, throughput read off
the step timeline."""

from __future__ import annotations

import math

import pytest

from orchestrator.core.generations import Generation
from orchestrator.fleet.step_cost import StepCostModel
from orchestrator.sim.batcher import SimBatcher
from orchestrator.sim.sequences import SimRequest
from orchestrator.sim.virtual import percentile, run_virtual

COST = StepCostModel.for_generation(Generation.MI300X)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([15, 20, 35, 40, 50], 5, 15),
        ([15, 20, 35, 40, 50], 30, 20),
        ([15, 20, 35, 40, 50], 40, 20),
        ([15, 20, 35, 40, 50], 50, 35),
        ([15, 20, 35, 40, 50], 100, 50),
        ([50, 15, 40, 20, 35], 50, 35),  # order of the input does not matter
        ([3, 6, 7, 8, 8, 10, 13, 15, 16, 20], 25, 7),
        ([3, 6, 7, 8, 8, 10, 13, 15, 16, 20], 75, 15),
        (list(range(1, 101)), 99, 99),
        (list(range(1, 1001)), 99, 990),
        ([4.2], 99, 4.2),
        ([1, 2, 3], 0, 1),
    ],
)
def test_percentile_is_the_nearest_rank(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == expected


def test_percentile_is_a_real_member_of_the_list_never_an_interpolation() -> None:
    assert percentile([1.0, 2.0], 50) == 1.0
    assert percentile([1.0, 2.0], 51) == 2.0


def test_percentile_of_nothing_is_nan() -> None:
    assert math.isnan(percentile([], 99))


def lone_prefill_s(prompt_tokens: int) -> float:
    """How long an idle replica takes to prefill one prompt: its first step."""
    batcher = SimBatcher(COST)
    batcher.submit(SimRequest(prompt_tokens, 1))
    return batcher.plan_step().duration_s


def test_a_lone_request_s_ttft_is_its_prefill_step_even_after_an_idle_gap() -> None:
    early = SimRequest(prompt_tokens=1000, output_tokens=20, arrival_s=5.0)
    late = SimRequest(prompt_tokens=3000, output_tokens=20, arrival_s=500.0)
    run = run_virtual(SimBatcher(COST), [late, early])
    assert early.finish_s < 6.0  # done long before the next arrival: the replica idles
    assert early.first_token_s == pytest.approx(5.0 + lone_prefill_s(1000), rel=1e-12)
    assert late.first_token_s == pytest.approx(500.0 + lone_prefill_s(3000), rel=1e-12)
    assert run.ttfts_s() == pytest.approx([lone_prefill_s(1000), lone_prefill_s(3000)])
    assert run.end_s == late.finish_s
    # Time is not spent stepping through the gap: only the two requests' steps ran.
    assert run.steps == 2 * 20


def test_an_empty_run_takes_no_time() -> None:
    run = run_virtual(SimBatcher(COST), [])
    assert (run.end_s, run.steps, run.output_tokens) == (0.0, 0, 0)


def saturated(max_num_seqs: int):
    """Sixty identical requests at once on a replica that runs `max_num_seqs` at a time."""
    requests = [SimRequest(100, 200, 0.0) for _ in range(60)]
    return run_virtual(SimBatcher(COST, max_num_seqs=max_num_seqs), requests)


def test_throughput_over_a_saturated_run_is_its_tokens_over_its_time() -> None:
    run = saturated(max_num_seqs=4)
    assert run.tokens_out[-1] == run.output_tokens == 60 * 200
    first_step_s, first_tokens = run.step_end_s[0], run.tokens_out[0]
    whole = run.throughput_between(0.0, run.end_s)
    assert whole == pytest.approx(
        (run.output_tokens - first_tokens) / (run.end_s - first_step_s), rel=1e-12
    )
    # Saturated throughout, so any long window in the middle sees the same rate.
    middle = run.throughput_between(0.3 * run.end_s, 0.7 * run.end_s)
    assert middle == pytest.approx(whole, rel=0.03)
    assert run.backlog_cleared_s > 0.8 * run.end_s


def test_four_times_the_batch_gives_more_but_not_four_times_the_tokens_per_second() -> None:
    # Decode is bound by the weight read, which a bigger batch shares; but with 4 of 128 experts
    # per token, 16 tokens touch far more experts than 4 do, so the read itself grows.
    small, large = saturated(max_num_seqs=4), saturated(max_num_seqs=16)
    ratio = large.throughput_between(0.0, large.end_s) / small.throughput_between(0.0, small.end_s)
    assert 1.2 < ratio < 3.0
    assert large.end_s < small.end_s


def test_a_window_with_fewer_than_two_steps_has_no_throughput() -> None:
    run = saturated(max_num_seqs=4)
    assert run.throughput_between(run.end_s + 1.0, run.end_s + 2.0) == 0.0
    assert run.throughput_between(0.0, run.step_end_s[0]) == 0.0


def test_tpot_excludes_the_first_token() -> None:
    run = run_virtual(SimBatcher(COST), [SimRequest(100, 11, 0.0), SimRequest(100, 1, 0.0)])
    [tpot] = run.tpots_s()  # a one-token request has no TPOT
    long = run.requests[0]
    assert tpot == pytest.approx((long.finish_s - long.first_token_s) / 10)
