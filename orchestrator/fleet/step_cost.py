"""Roofline step time of one continuous-batching engine step for GPT-OSS-120B on one GPU.

step time = weight-read time + (KV-read time + prefill compute time) / efficiency, where
- weight read: the non-expert weights plus the experts this step's tokens touch
  (E·(1-(1-k/E)^T) distinct experts of E for T tokens with k experts each), streamed at the
  achievable share of peak HBM bandwidth (an assumption, the same for every generation);
- KV read: every decoding sequence reads its whole context (full-attention layers) plus its
  sliding-window KV, and a prefill chunk reads the KV of the prompt before it, at peak bandwidth;
- prefill compute: 2·active-params FLOPs per prompt token plus causal attention FLOPs, at the
  generation's dense peak;
- efficiency: the share of that roofline the per-sequence kernels (paged attention, MoE grouped
  GEMMs) reach, the one figure per generation calibrated on the MLPerf Offline result.
Decode matmul FLOPs hide under the weight read (decode is memory-bound). Splitting the step this
way matters: a single factor on every term makes the fixed weight read as slow as the kernels,
and then no batch meets an 80 ms TPOT on MI300X although the published Server run does.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.core.generations import Generation, GenerationSpec, spec_of
from orchestrator.fleet.figures import FleetFigures, load_figures


@dataclass(frozen=True, slots=True)
class StepWork:
    """What one engine step does.

    `decode_context_tokens` sums the context (prompt + generated) of the decoding sequences;
    `prefill_prior_tokens` sums, over this step's prefill chunks, the prompt tokens computed in
    earlier steps; `prefill_attention_pairs` sums chunk_len·(prior + chunk_len/2) over the chunks.
    """

    decode_sequences: int
    decode_context_tokens: float
    prefill_tokens: int
    prefill_prior_tokens: float = 0.0
    prefill_attention_pairs: float = 0.0

    @property
    def tokens(self) -> int:
        return self.decode_sequences + self.prefill_tokens


@dataclass(frozen=True, slots=True)
class StepCostModel:
    """Step time and KV capacity of one replica of a generation."""

    spec: GenerationSpec
    figures: FleetFigures
    sequence_efficiency: float

    @classmethod
    def for_generation(
        cls,
        generation: Generation | str,
        *,
        sequence_efficiency: float | None = None,
        figures: FleetFigures | None = None,
    ) -> StepCostModel:
        figures = figures or load_figures()
        spec = spec_of(generation)
        if sequence_efficiency is None:
            sequence_efficiency = figures.sequence_efficiency_of(spec.generation)
        if not 0.0 < sequence_efficiency <= 1.0:
            raise ValueError(f"sequence_efficiency must be in (0, 1], got {sequence_efficiency}")
        return cls(spec=spec, figures=figures, sequence_efficiency=sequence_efficiency)

    @property
    def weight_bytes(self) -> float:
        return self.figures.model.weights_bytes[self.spec.expert_weights]

    @property
    def effective_bandwidth_bytes_per_s(self) -> float:
        return self.spec.hbm_bytes_per_s * self.figures.engine.hbm_bandwidth_efficiency

    @property
    def kv_capacity_tokens(self) -> int:
        """KV-cache tokens that fit in HBM after the weights, at the engine's memory share."""
        usable = self.spec.hbm_bytes * self.figures.engine.gpu_memory_utilization
        free = usable - self.weight_bytes
        if free <= 0:
            raise ValueError(
                f"{self.spec.generation} cannot hold the weights ({self.weight_bytes} B)"
            )
        return int(free / self.figures.model.kv_bytes_per_token)

    def weight_read_bytes(self, tokens: int) -> float:
        """Bytes of weights one step reads when it carries `tokens` tokens."""
        model = self.figures.model
        if tokens <= 0:
            return 0.0
        untouched = (1.0 - model.experts_per_token / model.experts) ** tokens
        expert_bytes = model.expert_bytes(self.spec.expert_weights)
        return model.non_expert_bytes() + expert_bytes * (1.0 - untouched)

    def step_time_s(self, work: StepWork) -> float:
        """Seconds one engine step takes; 0 for an empty step."""
        if work.tokens <= 0:
            return 0.0
        model = self.figures.model
        kv_tokens = (
            work.decode_context_tokens
            + work.decode_sequences * model.sliding_kv_tokens_per_sequence
            + work.prefill_prior_tokens
        )
        kv_bytes = kv_tokens * model.kv_bytes_per_token
        flops_per_pair = 4.0 * model.full_attention_layers * model.query_heads * model.head_dim
        prefill_flops = (
            2.0 * model.active_params * work.prefill_tokens
            + flops_per_pair * work.prefill_attention_pairs
        )
        weight_s = self.weight_read_bytes(work.tokens) / self.effective_bandwidth_bytes_per_s
        sequence_s = (
            kv_bytes / self.spec.hbm_bytes_per_s + prefill_flops / self.spec.dense_flops_per_s
        ) / self.sequence_efficiency
        return weight_s + sequence_s
