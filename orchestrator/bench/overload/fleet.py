"""The overload benchmark's fleet and load: replicas of one generation serving one request
shape, and the open-loop load offered to them."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.core.generations import Generation
from orchestrator.core.slo import MLPERF_TPOT_S as TARGET_TPOT_S
from orchestrator.core.slo import MLPERF_TTFT_S as TARGET_TTFT_S
from orchestrator.fleet.step_cost import StepCostModel, StepWork
from orchestrator.routing.stats import HEADROOM

MODEL = "openai/gpt-oss-120b"


def workload_capacity_tokens_per_s(
    generation: Generation, prompt_tokens: int, output_tokens: int
) -> float:
    """Output tokens/s one replica sustains on this workload within the TPOT target (real time).

    From the simulated engine's own step-cost model: in steady state a step decodes B
    sequences and prefills B·prompt/output prompt tokens; B* is the largest batch whose step
    takes at most the estimator's headroom × the TPOT target, and the capacity is B*/step.
    """
    model = StepCostModel.for_generation(generation)
    limit_s = HEADROOM * TARGET_TPOT_S
    best = 0.0
    context = prompt_tokens + output_tokens / 2
    for batch in range(1, model.figures.engine.max_num_seqs + 1):
        step_s = model.step_time_s(
            StepWork(
                decode_sequences=batch,
                decode_context_tokens=batch * context,
                prefill_tokens=round(batch * prompt_tokens / output_tokens),
                prefill_attention_pairs=batch / output_tokens * prompt_tokens**2 / 2,
            )
        )
        if step_s > limit_s:
            break
        best = batch / step_s
    return best


@dataclass(frozen=True, slots=True)
class UniformFleet:
    """The simulated fleet: `replicas` replicas of `generation` slowed down `time_scale` times,
    serving requests of `prompt_tokens` in and `output_tokens` out (ignore_eos).

    Each replica's capacity is its step-cost model's on this workload (the table's
    `capacityTokensPerS`, as an operator who benchmarked it would set), unless
    `capacity_tokens_per_s` overrides it."""

    replicas: int = 2
    generation: Generation = Generation.MI300X
    time_scale: float = 2.0
    prompt_tokens: int = 2000
    output_tokens: int = 32
    capacity_tokens_per_s: float | None = None

    def replica_capacity(self) -> float:
        if self.capacity_tokens_per_s is not None:
            return self.capacity_tokens_per_s
        real = workload_capacity_tokens_per_s(
            self.generation, self.prompt_tokens, self.output_tokens
        )
        return real / self.time_scale

    @property
    def capacity_tokens(self) -> float:
        """The fleet's output tokens/s within the latency targets."""
        return self.replicas * self.replica_capacity()

    @property
    def capacity_requests(self) -> float:
        return self.capacity_tokens / self.output_tokens

    @property
    def target_ttft_s(self) -> float:
        return TARGET_TTFT_S * self.time_scale


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """Open-loop load: `load` × the capacity rate for `duration_s`, `batch_share` of it batch."""

    load: float = 3.0
    duration_s: float = 60.0
    batch_share: float = 0.0
    drain_s: float = 30.0
    seed: int = 0
