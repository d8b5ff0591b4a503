"""Continuous batching as vLLM does it: a token budget per step, a sequence limit, KV-limited
admission, chunked prefill, preemption by recompute, and abort, on small limits that bind."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.core.clock import ManualClock
from orchestrator.core.generations import Generation
from orchestrator.fleet.step_cost import StepCostModel
from orchestrator.sim.batcher import SimBatcher
from orchestrator.sim.sequences import SimRequest, StepOutcome, StepPlan
from orchestrator.sim.virtual import run_virtual

COST = StepCostModel.for_generation(Generation.MI300X)
# Every running sequence also holds its sliding-window KV (128 tokens for GPT-OSS-120B).
SLIDING_KV_TOKENS = 128


class RecordingBatcher(SimBatcher):
    """The real batcher, keeping each step's plan and outcome for the test to read."""

    def __init__(self, **limits: int) -> None:
        super().__init__(COST, **limits)
        self.plans: list[StepPlan] = []
        self.outcomes: list[StepOutcome] = []
        self.kv_after_step: list[float] = []

    def plan_step(self) -> StepPlan:
        plan = super().plan_step()
        if not self.plans or self.plans[-1] is not plan:  # a re-plan returns the same plan
            self.plans.append(plan)
        return plan

    def finish_step(self, now_s: float) -> StepOutcome:
        outcome = super().finish_step(now_s)
        self.outcomes.append(outcome)
        self.kv_after_step.append(self.kv_used_tokens)
        return outcome

    def appearances(self, request: SimRequest) -> list[str]:
        seen = []
        for outcome in self.outcomes:
            seen += ["first_token"] * outcome.first_tokens.count(request)
            seen += ["finished"] * outcome.finished.count(request)
            seen += ["preempted"] * outcome.preempted.count(request)
        return seen


@dataclass
class Driver:
    """Steps a batcher on a manual clock, as the live engine does without the sleeping."""

    batcher: RecordingBatcher
    clock: ManualClock = field(default_factory=ManualClock)

    def submit(self, *requests: SimRequest) -> None:
        for request in requests:
            self.batcher.submit(request)

    def step(self) -> StepOutcome:
        plan = self.batcher.plan_step()
        self.clock.advance(plan.duration_s)
        return self.batcher.finish_step(self.clock.now())

    def run_until_idle(self, max_steps: int = 100_000) -> None:
        for _ in range(max_steps):
            if not self.batcher.has_work:
                return
            self.step()
        raise AssertionError(f"still busy after {max_steps} steps")


def driver(**limits: int) -> Driver:
    return Driver(RecordingBatcher(**limits))


def test_no_step_carries_more_tokens_than_the_budget() -> None:
    engine = driver(max_num_seqs=4, max_num_batched_tokens=64)
    engine.submit(*(SimRequest(10 + 23 * i % 150, 5 + i % 30) for i in range(12)))
    engine.run_until_idle()
    plans = engine.batcher.plans
    for plan in plans:
        chunked = sum(take for _, take in plan.prefill_chunks)
        assert plan.work.decode_sequences + chunked == plan.work.tokens <= 64
    assert max(plan.work.tokens for plan in plans) == 64  # the budget binds


def test_a_long_prompt_is_prefilled_in_budget_sized_chunks_and_its_first_token_ends_the_last() -> (
    None
):
    engine = driver(max_num_seqs=4, max_num_batched_tokens=64)
    request = SimRequest(prompt_tokens=200, output_tokens=5)
    engine.submit(request)
    streamed = []
    for _ in range(4):
        outcome = engine.step()
        streamed.append(engine.batcher.generated_tokens(request))
    assert [plan.work.prefill_tokens for plan in engine.batcher.plans] == [64, 64, 64, 8]
    assert streamed == [0, 0, 0, 1]
    assert [o.first_tokens for o in engine.batcher.outcomes] == [[], [], [], [request]]
    assert request.first_token_s == engine.clock.now()
    assert outcome.prompt_tokens_computed == 8
    engine.run_until_idle()
    assert sum(o.prompt_tokens_computed for o in engine.batcher.outcomes) == 200


def test_requests_beyond_max_num_seqs_wait_until_a_running_one_finishes() -> None:
    engine = driver(max_num_seqs=4, max_num_batched_tokens=512)
    first_four = [SimRequest(10, 20 + i) for i in range(4)]
    last_two = [SimRequest(10, 20), SimRequest(10, 20)]
    engine.submit(*first_four, *last_two)
    engine.step()
    assert (engine.batcher.num_running, engine.batcher.num_waiting) == (4, 2)
    while engine.batcher.has_work:
        engine.step()
        assert engine.batcher.num_running <= 4
    earliest_finish = min(r.finish_s for r in first_four)
    assert all(r.first_token_s > earliest_finish for r in last_two)
    assert all(r.finished for r in first_four + last_two)


def test_a_request_waits_while_the_kv_cache_cannot_hold_its_prompt() -> None:
    # 500 KV tokens hold two 50-token prompts with their sliding windows (2 x 179), not three.
    engine = driver(max_num_seqs=4, max_num_batched_tokens=512, kv_capacity_tokens=500)
    a, b, c = SimRequest(50, 20), SimRequest(50, 20), SimRequest(50, 20)
    engine.submit(a, b, c)
    engine.step()
    assert (engine.batcher.num_running, engine.batcher.num_waiting) == (2, 1)
    assert engine.batcher.kv_used_tokens == 2 * (50 + 1 + SLIDING_KV_TOKENS)
    engine.run_until_idle()
    assert c.first_token_s > max(a.finish_s, b.finish_s)
    assert max(engine.batcher.kv_after_step) <= 500
    assert engine.batcher.plans[0].preempted == []


def test_a_prompt_is_admitted_only_when_the_token_it_produces_fits_too() -> None:
    # Each 50-token prompt needs 50 + 1 + 128 = 179 tokens; 357 is one short of two of them.
    engine = driver(max_num_seqs=4, max_num_batched_tokens=512, kv_capacity_tokens=357)
    a, b = SimRequest(50, 3), SimRequest(50, 3)
    engine.submit(a, b)
    engine.step()
    assert (engine.batcher.num_running, engine.batcher.num_waiting) == (1, 1)
    engine.run_until_idle()
    assert max(engine.batcher.kv_after_step) <= 357
    assert b.first_token_s > a.finish_s


def preempting_pair() -> tuple[Driver, SimRequest, SimRequest, dict[int, list[int]]]:
    """Two sequences whose growth overflows a 400-token KV cache after about 20 tokens each;
    returns the counts a streaming client of each would see after every step."""
    engine = driver(max_num_seqs=4, max_num_batched_tokens=512, kv_capacity_tokens=400)
    older, newer = SimRequest(50, 100), SimRequest(50, 100)
    engine.submit(older, newer)
    streamed: dict[int, list[int]] = {older.request_id: [], newer.request_id: []}
    while engine.batcher.has_work:
        engine.step()
        for request in (older, newer):
            streamed[request.request_id].append(engine.batcher.generated_tokens(request))
    return engine, older, newer, streamed


def test_when_decoding_overflows_the_kv_cache_the_newest_sequence_is_preempted() -> None:
    engine, older, newer, _ = preempting_pair()
    assert (older.preemptions, newer.preemptions) == (0, 1)
    assert engine.batcher.appearances(newer).count("preempted") == 1
    assert max(engine.batcher.kv_after_step) <= 400
    # It is recomputed once the older one has finished and freed the cache.
    assert newer.finish_s > older.finish_s


def test_a_preempted_request_still_finishes_with_exactly_its_output_tokens() -> None:
    engine, older, newer, streamed = preempting_pair()
    assert engine.batcher.generated_tokens(older) == 100
    assert engine.batcher.generated_tokens(newer) == 100
    assert streamed[newer.request_id][-1] == 100
    # The engine's generation-token counter (vllm:generation_tokens_total) counts each token once.
    assert sum(o.tokens_generated for o in engine.batcher.outcomes) == 200
    assert engine.batcher.kv_used_tokens == 0


def test_a_streaming_client_never_sees_the_token_count_go_back_through_a_preemption() -> None:
    _, _, newer, streamed = preempting_pair()
    for counts in streamed.values():
        assert counts == sorted(counts)
        assert max(counts) == 100
    # While the newer one waits to be recomputed its count holds rather than restarting.
    newer_counts = streamed[newer.request_id]
    assert newer_counts.count(newer_counts[30]) > 1
    assert newer_counts[30] > 1


def test_a_preemption_does_not_move_the_first_token_time() -> None:
    # TTFT is what the client saw; recompute after a preemption is not a new first token.
    engine, _, newer, _ = preempting_pair()
    assert engine.batcher.appearances(newer) == ["first_token", "preempted", "finished"]
    assert newer.first_token_s == engine.batcher.outcomes[0].first_tokens[-1].first_token_s


def advance_to(engine: Driver, request: SimRequest, state: str) -> None:
    for _ in range(100):
        if request.state == state:
            return
        engine.step()
    raise AssertionError(f"request never reached {state!r}")


@pytest.mark.parametrize("state", ["waiting", "prefilling", "decoding"])
def test_aborting_a_lone_request_frees_all_its_kv(state: str) -> None:
    engine = driver(max_num_seqs=4, max_num_batched_tokens=64)
    request = SimRequest(prompt_tokens=200, output_tokens=50)
    engine.submit(request)
    advance_to(engine, request, state)
    if state != "waiting":
        assert engine.batcher.kv_used_tokens > 0
    engine.batcher.abort(request)
    assert engine.batcher.kv_used_tokens == 0
    assert engine.batcher.kv_usage == 0
    assert (engine.batcher.num_running, engine.batcher.num_waiting) == (0, 0)
    assert not engine.batcher.has_work
    assert request.state == "aborted" and request.finish_s is None


@pytest.mark.parametrize("state", ["waiting", "prefilling", "decoding"])
def test_an_aborted_request_never_appears_in_a_later_step(state: str) -> None:
    engine = driver(max_num_seqs=2, max_num_batched_tokens=64)
    others = [SimRequest(30, 40), SimRequest(30, 60), SimRequest(30, 10)]
    target = SimRequest(prompt_tokens=200, output_tokens=50)
    # With two sequences at most, the target waits behind the first two until one finishes.
    engine.submit(*others[:2], target, others[2])
    advance_to(engine, target, state)
    steps_before_abort = len(engine.batcher.outcomes)
    # What it holds: the prompt computed so far, its generated tokens and its sliding window.
    held = {
        "waiting": 0,
        "prefilling": target.computed_prompt + SLIDING_KV_TOKENS,
        "decoding": 200 + engine.batcher.generated_tokens(target) + SLIDING_KV_TOKENS,
    }[state]
    kv_before = engine.batcher.kv_used_tokens
    engine.batcher.abort(target)
    assert engine.batcher.kv_used_tokens == kv_before - held
    engine.run_until_idle()
    for outcome in engine.batcher.outcomes[steps_before_abort:]:
        assert target not in outcome.first_tokens + outcome.finished + outcome.preempted
    assert all(r.finished and r.state == "finished" for r in others)
    assert target.state == "aborted"
    assert engine.batcher.kv_used_tokens == 0


def test_a_request_aborted_while_its_last_step_runs_is_not_reported_finished() -> None:
    engine = driver(max_num_seqs=4, max_num_batched_tokens=64)
    request = SimRequest(prompt_tokens=10, output_tokens=3)
    engine.submit(request)
    engine.step()
    engine.step()
    plan = engine.batcher.plan_step()  # the step that would produce its third and last token
    engine.batcher.abort(request)
    outcome = engine.batcher.finish_step(engine.clock.now() + plan.duration_s)
    assert outcome.finished == []
    assert request.state == "aborted"
    assert not engine.batcher.has_work


def test_aborting_a_finished_request_changes_nothing() -> None:
    engine = driver(max_num_seqs=4, max_num_batched_tokens=64)
    request = SimRequest(prompt_tokens=10, output_tokens=2)
    engine.submit(request)
    engine.run_until_idle()
    engine.batcher.abort(request)
    assert request.state == "finished"
    assert engine.batcher.generated_tokens(request) == 2


def test_a_prompt_larger_than_the_kv_cache_is_rejected_at_submit() -> None:
    batcher = SimBatcher(COST, kv_capacity_tokens=500)
    with pytest.raises(ValueError, match=r"prompt of 600 tokens exceeds the KV cache \(500"):
        batcher.submit(SimRequest(prompt_tokens=600, output_tokens=1))
    assert not batcher.has_work
    batcher.submit(SimRequest(prompt_tokens=300, output_tokens=1))
    assert batcher.num_waiting == 1


@pytest.mark.parametrize(("prompt", "output"), [(0, 10), (10, 0)])
def test_a_request_with_no_prompt_or_no_output_is_rejected(prompt: int, output: int) -> None:
    with pytest.raises(ValueError, match="at least one prompt token and one output token"):
        SimBatcher(COST).submit(SimRequest(prompt, output))


@st.composite
def workloads(draw: st.DrawFn) -> tuple[dict[str, int], list[SimRequest]]:
    lengths = draw(
        st.lists(
            st.tuples(
                st.integers(1, 300),  # prompt tokens
                st.integers(1, 120),  # output tokens
                st.floats(0.0, 0.5),  # arrival, s
            ),
            min_size=1,
            max_size=25,
        )
    )
    # The cache holds at least the largest request whole, or that request could never finish.
    largest = max(prompt + output for prompt, output, _ in lengths) + SLIDING_KV_TOKENS + 1
    limits = {
        "max_num_seqs": draw(st.integers(1, 8)),
        "max_num_batched_tokens": draw(st.integers(8, 256)),
        "kv_capacity_tokens": largest + draw(st.integers(0, 1500)),
    }
    return limits, [SimRequest(p, o, arrival) for p, o, arrival in lengths]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_every_request_finishes_exactly_once_with_its_output_tokens(
    workload: tuple[dict[str, int], list[SimRequest]],
) -> None:
    limits, requests = workload
    batcher = RecordingBatcher(**limits)
    run = run_virtual(batcher, requests)
    for request in requests:
        assert request.state == "finished"
        assert batcher.generated_tokens(request) == request.output_tokens
        appearances = batcher.appearances(request)
        assert appearances.count("first_token") == 1
        assert appearances.count("finished") == 1
        assert request.arrival_s <= request.first_token_s <= request.finish_s <= run.end_s
    assert run.tokens_out[-1] == sum(r.output_tokens for r in requests)
    assert run.preemptions == sum(r.preemptions for r in requests)
    for plan in batcher.plans:
        assert plan.work.tokens <= limits["max_num_batched_tokens"]
    assert max(batcher.kv_after_step) <= limits["kv_capacity_tokens"]
    assert batcher.kv_used_tokens == 0
