"""The fleet model's step time with its constants worked out once, for the virtual-time fleet.

A 512-replica simulation asks for tens of millions of step times; `StepCostModel.step_time_s`
re-derives the same byte counts from the model shape on every call. This subclass computes the
same formula from precomputed constants (a test checks the two agree) and changes nothing else,
except on purpose: `speed_up` stands for a software upgrade mid-run.
"""

from __future__ import annotations

from orchestrator.fleet.step_cost import StepCostModel, StepWork


class PrecomputedStepCost(StepCostModel):
    """`StepCostModel` with `step_time_s` reading constants fixed at construction."""

    _constants: tuple[float, float, float, float, float, float, float, float, float]

    def __init__(self, base: StepCostModel) -> None:
        super().__init__(base.spec, base.figures, base.sequence_efficiency)
        model = base.figures.model
        object.__setattr__(
            self,
            "_constants",
            (
                1.0 - model.experts_per_token / model.experts,
                model.non_expert_bytes(),
                model.expert_bytes(base.spec.expert_weights),
                base.effective_bandwidth_bytes_per_s,
                model.sliding_kv_tokens_per_sequence,
                model.kv_bytes_per_token / base.spec.hbm_bytes_per_s / base.sequence_efficiency,
                2.0 * model.active_params / base.spec.dense_flops_per_s / base.sequence_efficiency,
                4.0 * model.full_attention_layers * model.query_heads * model.head_dim
                / base.spec.dense_flops_per_s / base.sequence_efficiency,
                0.0,
            ),
        )  # fmt: skip

    def speed_up(self, factor: float) -> None:
        """From now on every step takes 1/`factor` of its time (a new engine or ROCm release
        rolled out to the engines sharing this model); steps already under way keep theirs.
        Memory, KV capacity and batch limits stay: an upgrade is faster kernels, not more HBM."""
        if not factor > 0:
            raise ValueError(f"a speed-up factor must be > 0, got {factor}")
        keep, fixed, experts, bandwidth, sliding, per_kv, per_prefill, per_pair, _ = self._constants
        object.__setattr__(
            self,
            "_constants",
            (
                keep, fixed, experts, bandwidth * factor, sliding, per_kv / factor,
                per_prefill / factor, per_pair / factor, 0.0,
            ),
        )  # fmt: skip

    def step_time_s(self, work: StepWork) -> float:
        sequences, prefill = work.decode_sequences, work.prefill_tokens
        tokens = sequences + prefill
        if tokens <= 0:
            return 0.0
        keep, fixed, experts, bandwidth, sliding, per_kv, per_prefill, per_pair, _ = self._constants
        kv_tokens = work.decode_context_tokens + sequences * sliding + work.prefill_prior_tokens
        weight_s = (fixed + experts * (1.0 - keep**tokens)) / bandwidth
        return (
            weight_s
            + kv_tokens * per_kv
            + prefill * per_prefill
            + work.prefill_attention_pairs * per_pair
        )

    def decode_step_time_s(self, sequences: int, context_tokens: float) -> float:
        """`step_time_s(StepWork(sequences, context_tokens, 0))` without building the `StepWork`.

        The same operations in the same order; the prefill terms it leaves out add exact zeros.
        """
        if sequences <= 0:
            return 0.0
        keep, fixed, experts, bandwidth, sliding, per_kv, _, _, _ = self._constants
        kv_tokens = context_tokens + sequences * sliding
        weight_s = (fixed + experts * (1.0 - keep**sequences)) / bandwidth
        return weight_s + kv_tokens * per_kv
