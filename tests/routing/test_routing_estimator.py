"""The capacity estimator learns what each replica sustains from what its /metrics page says."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from orchestrator.core.generations import Generation
from orchestrator.core.records import ReplicaLoad
from orchestrator.engines import adapter_for
from orchestrator.fleet.figures import capacity_prior_tokens_per_s, load_figures
from orchestrator.fleet.step_cost import StepCostModel
from orchestrator.fleet.workload import WorkloadSampler
from orchestrator.routing.estimator import CapacityEstimator
from orchestrator.routing.stats import ReplicaStats
from orchestrator.sim.batcher import SimBatcher
from orchestrator.sim.sequences import SimRequest

TARGET_TPOT_S = 0.080
SCRAPE_S = 1.0


@dataclass
class VirtualReplica:
    """A simulated engine in virtual time, scraped like a live one."""

    generation: Generation
    prior_tokens_per_s: float
    batcher: SimBatcher = field(init=False)
    stats: ReplicaStats = field(init=False)
    clock_s: float = 0.0
    generated: int = 0
    prompted: int = 0
    plan_end_s: float | None = None

    def __post_init__(self) -> None:
        self.batcher = SimBatcher(StepCostModel.for_generation(self.generation))
        self.stats = ReplicaStats(self.prior_tokens_per_s)

    def run_until(self, until_s: float) -> None:
        batcher = self.batcher
        while True:
            if not batcher.has_work:
                self.clock_s = until_s
                return
            if self.plan_end_s is None:
                self.plan_end_s = self.clock_s + batcher.plan_step().duration_s
            if self.plan_end_s > until_s:
                return
            self.clock_s = self.plan_end_s
            self.plan_end_s = None
            outcome = batcher.finish_step(self.clock_s)
            self.generated += outcome.tokens_generated
            self.prompted += outcome.prompt_tokens_computed
            self.stats.in_flight -= len(outcome.finished)

    def submit(self, request: SimRequest, now_s: float) -> None:
        if not self.batcher.has_work:
            self.clock_s = now_s
        self.stats.in_flight += 1
        self.batcher.submit(request)

    def scrape(self, now_s: float) -> ReplicaLoad:
        b = self.batcher
        return ReplicaLoad(
            b.num_running, b.num_waiting, b.kv_usage, self.prompted, self.generated, now_s
        )


def vllm_page(replica: VirtualReplica) -> str:
    """What vLLM's `/metrics` would say about the replica (the lines the adapter reads)."""
    b, labels = replica.batcher, 'engine="0",model_name="openai/gpt-oss-120b"'
    return (
        f"vllm:num_requests_running{{{labels}}} {b.num_running}\n"
        f"vllm:num_requests_waiting{{{labels}}} {b.num_waiting}\n"
        f"vllm:kv_cache_usage_perc{{{labels}}} {b.kv_usage}\n"
        f"vllm:prompt_tokens_total{{{labels}}} {replica.prompted}\n"
        f"vllm:generation_tokens_total{{{labels}}} {replica.generated}\n"
    )


def sglang_page(replica: VirtualReplica) -> str:
    """What current SGLang would say: two tensor-parallel ranks reporting one batch, the per-step
    token counter by mode, and the finished-request counters (left at 0: they lag)."""
    b, lines = replica.batcher, []
    for tp_rank in ("0", "1"):
        labels = (
            'engine_type="unified",model_name="openai/gpt-oss-120b",moe_ep_rank="0",'
            f'pp_rank="0",tp_rank="{tp_rank}"'
        )
        lines += [
            f"sglang:num_running_reqs{{{labels}}} {b.num_running}",
            f"sglang:num_queue_reqs{{{labels}}} {b.num_waiting}",
            f"sglang:token_usage{{{labels}}} {b.kv_usage}",
            f'sglang:realtime_tokens_total{{{labels},mode="prefill_compute"}} {replica.prompted}',
            f'sglang:realtime_tokens_total{{{labels},mode="prefill_cache"}} 0',
            f'sglang:realtime_tokens_total{{{labels},mode="decode"}} {replica.generated}',
        ]
    lines.append('sglang:generation_tokens_total{model_name="openai/gpt-oss-120b"} 0')
    return "\n".join(lines) + "\n"


def drive(
    replicas: list[VirtualReplica],
    offered_tokens_per_s: float,
    duration_s: float,
    seed: int = 0,
    page: Callable[[VirtualReplica], str] | None = None,
    engine: str = "vllm",
) -> CapacityEstimator:
    """Poisson GPT-OSS traffic, each request to the replica with the lowest utilisation
    (in flight over concurrency capacity: what the capacity-headroom scorer maximises).

    With `page`, each scrape goes through that page and `engine`'s adapter, as a live one does."""
    estimator = CapacityEstimator(target_ttft_s=3.0, target_tpot_s=TARGET_TPOT_S)
    sampler = WorkloadSampler(seed=seed)
    gaps = random.Random(seed + 1)
    rate = offered_tokens_per_s / load_figures().workload.mean_output_tokens
    now, next_arrival, next_scrape = 0.0, gaps.expovariate(rate), SCRAPE_S
    while now < duration_s:
        now = min(next_arrival, next_scrape)
        for replica in replicas:
            replica.run_until(now)
        if now == next_scrape:
            for index, replica in enumerate(replicas):
                load = (
                    replica.scrape(now)
                    if page is None
                    else adapter_for(engine).parse_load(page(replica), now)
                )
                estimator.update(str(index), replica.stats, load, now)
            next_scrape += SCRAPE_S
            continue
        sample = sampler.draw()
        target = min(
            replicas,
            key=lambda r: (r.stats.in_flight + 1) / r.stats.concurrency_capacity(TARGET_TPOT_S),
        )
        target.submit(SimRequest(sample.input_tokens, sample.output_tokens, now), now)
        next_arrival = now + gaps.expovariate(rate)
    return estimator


def prior(generation: Generation) -> float:
    return capacity_prior_tokens_per_s(load_figures(), generation)


def test_an_idle_replica_keeps_its_prior() -> None:
    replica = VirtualReplica(Generation.MI355X, prior(Generation.MI355X))
    drive([replica], offered_tokens_per_s=0.0001, duration_s=30)
    assert replica.stats.capacity_tokens_per_s == pytest.approx(prior(Generation.MI355X))


def test_a_lightly_loaded_fast_gpu_does_not_look_slow() -> None:
    """At a fifth of its capacity an MI355X generates a fifth of its capacity; the estimate must
    not follow the live rate down (SMG's least_load would)."""
    capacity = prior(Generation.MI355X)
    replica = VirtualReplica(Generation.MI355X, capacity)
    drive([replica], offered_tokens_per_s=0.2 * capacity, duration_s=180)
    observed = replica.generated / 180
    print(f"\nobserved {observed:,.0f} tok/s, estimate {replica.stats.capacity_tokens_per_s:,.0f}")
    assert observed < 0.3 * capacity
    assert replica.stats.capacity_tokens_per_s > 0.75 * capacity


@pytest.mark.parametrize("seed", [11, 12])
def test_started_with_all_replicas_equal_it_learns_the_mi355x_to_mi300x_ratio(seed: int) -> None:
    fast, slow = prior(Generation.MI355X), prior(Generation.MI300X)
    equal = (fast + slow) / 2
    true_ratio = fast / slow
    replicas = [
        VirtualReplica(Generation.MI355X, equal),
        VirtualReplica(Generation.MI355X, equal),
        VirtualReplica(Generation.MI300X, equal),
        VirtualReplica(Generation.MI300X, equal),
    ]
    drive(replicas, offered_tokens_per_s=0.8 * 2 * (fast + slow), duration_s=120, seed=seed)
    capacities = [r.stats.capacity_tokens_per_s for r in replicas]
    learned = (capacities[0] + capacities[1]) / (capacities[2] + capacities[3])
    print(f"\nlearned ratio {learned:.2f}, true {true_ratio:.2f}, capacities {capacities}")
    assert learned == pytest.approx(true_ratio, rel=0.15)
    total = sum(r.generated for r in replicas)
    for replica in replicas[:2]:
        share = replica.generated / total
        assert share == pytest.approx(fast / (2 * (fast + slow)), rel=0.15)


def test_a_counter_reset_is_ignored_not_read_as_negative_throughput() -> None:
    estimator = CapacityEstimator(target_ttft_s=3.0, target_tpot_s=TARGET_TPOT_S)
    stats = ReplicaStats(1000.0)
    estimator.update("r", stats, ReplicaLoad(50, 0, 0.3, 1e6, 1e6, 0.0), 0.0)
    estimator.update("r", stats, ReplicaLoad(50, 0, 0.3, 10.0, 10.0, 1.0), 1.0)
    assert stats.capacity_tokens_per_s == 1000.0


def test_a_queue_over_a_flat_batch_caps_capacity_at_that_batch() -> None:
    """An engine stuck at its sequence limit with requests waiting cannot do more than the
    rate it runs at, however cheap its steps look."""
    estimator = CapacityEstimator(target_ttft_s=3.0, target_tpot_s=TARGET_TPOT_S)
    stats = ReplicaStats(100_000.0)
    generated = 0.0
    for second in range(60):
        generated += 64 / 0.02  # 64 sequences, a 20 ms step: 3,200 tokens/s
        load = ReplicaLoad(64, 40, 0.5, generated * 4, generated, float(second))
        estimator.update("r", stats, load, float(second))
    assert stats.capacity_tokens_per_s < 1.2 * 3_200


def test_a_slow_stepping_engine_queue_is_no_limit_until_it_lasts_many_steps() -> None:
    """A replica stepping every 2 s shows each scrape's arrivals waiting for the next step
    while the batch stays flat: that is the step's queue, not a sequence limit, until it has
    lasted many steps (a time-scaled replica under a router that holds its batch at its room)."""
    estimator = CapacityEstimator(target_ttft_s=30.0, target_tpot_s=2.0)
    stats = ReplicaStats(1_000.0)
    generated = 0.0
    for second in range(1, 61):
        generated += 64 / 2.0  # 64 sequences, a 2 s step, 40 waiting at every scrape
        load = ReplicaLoad(64, 40, 0.5, generated * 4, generated, float(second))
        estimator.update("r", stats, load, float(second))
        if second == 35:  # 17 steps: the step's own queue
            assert stats.batch_limit is None
    assert stats.batch_limit == 64  # from 20 steps on, a queue that outlasts them is the limit


def test_an_sglang_replica_is_learned_as_a_vllm_one_is() -> None:
    """The same engines, scraped through SGLang's page instead of vLLM's, end at the same
    capacities: the adapter reads SGLang's per-step token counter and counts its ranks once."""
    fast, slow = prior(Generation.MI355X), prior(Generation.MI300X)
    learned = {}
    for engine, page in (("vllm", vllm_page), ("sglang", sglang_page)):
        replicas = [
            VirtualReplica(Generation.MI355X, slow),
            VirtualReplica(Generation.MI300X, slow),
        ]
        drive(replicas, 0.8 * (fast + slow), duration_s=120, seed=11, page=page, engine=engine)
        learned[engine] = [r.stats.capacity_tokens_per_s for r in replicas]
    print(f"\nlearned {learned}, true {fast:,.0f} and {slow:,.0f}")
    assert learned["sglang"] == pytest.approx(learned["vllm"], rel=0.01)
    mi355x, mi300x = learned["sglang"]
    assert mi355x > 0.75 * fast  # from a prior of the MI300X's capacity
    assert mi355x > 3 * mi300x
