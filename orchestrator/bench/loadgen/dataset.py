"""A synthetic query set with the MLPerf gpt-oss-120b length statistics, deterministic per seed.

Each sample is (input tokens, output tokens) from the fleet workload sampler (log-normal, capped
at the published maxima, capped mean = published mean). The prompt is text the simulated engine
counts as exactly that many tokens (four bytes a token, plus the chat template's few); the
output length is enforced with `max_tokens` and `ignore_eos`, as MLPerf harnesses do.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from orchestrator.fleet.workload import WorkloadSampler
from orchestrator.sim.text import BYTES_PER_TOKEN, CHAT_TOKENS_PER_MESSAGE, CHAT_TOKENS_PER_REPLY

CHAT_OVERHEAD_TOKENS = CHAT_TOKENS_PER_MESSAGE + CHAT_TOKENS_PER_REPLY
PROMPT_UNIT = "data"  # four bytes: one token to the simulated engine


@dataclass(frozen=True, slots=True)
class Sample:
    input_tokens: int
    output_tokens: int

    def prompt(self) -> str:
        """Message text whose chat counts `input_tokens` prompt tokens."""
        return PROMPT_UNIT * max(1, self.input_tokens - CHAT_OVERHEAD_TOKENS)


@dataclass(frozen=True, slots=True)
class Dataset:
    samples: tuple[Sample, ...]

    @classmethod
    def synthetic(
        cls, count: int, seed: int = 0, *, max_output_tokens: int | None = None
    ) -> Dataset:
        """`count` samples; `max_output_tokens` caps outputs further (short runs and tests)."""
        if count < 1:
            raise ValueError(f"a dataset needs at least one sample, got {count}")
        if max_output_tokens is not None and max_output_tokens < 1:
            raise ValueError(f"max_output_tokens must be >= 1, got {max_output_tokens}")
        sampler = WorkloadSampler(seed=seed)
        samples = []
        for drawn in sampler.draw_many(count):
            output = drawn.output_tokens
            if max_output_tokens is not None:
                output = min(output, max_output_tokens)
            samples.append(Sample(max(drawn.input_tokens, CHAT_OVERHEAD_TOKENS + 1), output))
        return cls(tuple(samples))

    def __len__(self) -> int:
        return len(self.samples)

    def mean_input_tokens(self) -> float:
        return statistics.fmean(s.input_tokens for s in self.samples)

    def mean_output_tokens(self) -> float:
        return statistics.fmean(s.output_tokens for s in self.samples)


assert len(PROMPT_UNIT.encode()) == BYTES_PER_TOKEN
