"""The records the batcher works with: a sequence in the engine, a planned step, a step's outcome.

Kept apart from `batcher.py` so that drivers and servers can hold and build requests without the
scheduling policy; the batcher alone changes a `SimRequest`'s engine state.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from orchestrator.fleet.step_cost import StepWork


@dataclass(slots=True, eq=False)
class SimRequest:
    """One sequence inside the engine.

    `output_tokens` is how many tokens it will produce (decided by the caller: the smaller of
    max_tokens and the sampled natural length). Times are in the driver's clock, seconds.
    """

    prompt_tokens: int
    output_tokens: int
    arrival_s: float = 0.0
    request_id: int = field(default_factory=itertools.count().__next__)
    first_token_s: float | None = None
    finish_s: float | None = None
    # Engine state; read through SimBatcher, not directly.
    state: str = "new"
    computed_prompt: int = 0
    generated_before: int = 0
    decode_start_step: int = 0
    preemptions: int = 0
    _epoch: int = 0

    @property
    def finished(self) -> bool:
        return self.state in ("finished", "aborted")


@dataclass(slots=True)
class StepPlan:
    """What the next step computes; `duration_s` is simulated (unscaled) seconds.

    `work` is built on demand for a decode-only step (`prefill_work` None): most steps are, and
    the virtual-time fleet never asks for it, which saves an object per step.
    """

    duration_s: float
    decode_sequences: int
    decode_context_tokens: float
    prefill_chunks: list[tuple[SimRequest, int]]
    preempted: list[SimRequest]
    prefill_work: StepWork | None = None

    @property
    def work(self) -> StepWork:
        if self.prefill_work is not None:
            return self.prefill_work
        return StepWork(self.decode_sequences, self.decode_context_tokens, 0)

    @property
    def prefill_tokens(self) -> int:
        return 0 if self.prefill_work is None else self.prefill_work.prefill_tokens


@dataclass(slots=True)
class StepOutcome:
    """Requests whose first token or last token came out of the step just finished."""

    first_tokens: list[SimRequest]
    finished: list[SimRequest]
    preempted: list[SimRequest]
    tokens_generated: int
    prompt_tokens_computed: int
