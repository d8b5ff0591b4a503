"""How one validated request will play out: its lengths, its end, its reasoning and its tool call,
and the text it writes as its token count grows.

Shared by chat completions, text completions and the Responses API, so every route applies
vLLM's length rules and gpt-oss's reasoning the same way. The output is reasoning tokens first,
then the answer: text, or one function call whose JSON arguments come out as the tokens do.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.fleet.workload import WorkloadSampler, split_output
from orchestrator.sim.text import TextWriter, text_tokens
from orchestrator.sim.tools import FunctionTool, arguments_for

CALL_OVERHEAD_TOKENS: Final = 4  # the call's recipient and channel markers, as harmony writes them


@dataclass(frozen=True, slots=True)
class Limits:
    """What a request asks of its length: `max_tokens` None means up to the context's end."""

    max_tokens: int | None
    seed: int | None = None
    ignore_eos: bool = False
    min_tokens: int = 0
    stops: Sequence[str] = ()
    reasoning_effort: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call the answer makes; `arguments` is a JSON object's text."""

    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Plan:
    """How a request plays out. `output_tokens` counts reasoning and answer together; `tool_call`
    is set only when the whole call fits (a call cut by the length limit is not made)."""

    prompt_tokens: int
    output_tokens: int
    finish_reason: str
    text_seed: int
    keep_chars: int | None
    reasoning_tokens: int = 0
    reasoning_seed: int = 0
    tool_call: ToolCall | None = None

    @property
    def answer_tokens(self) -> int:
        return self.output_tokens - self.reasoning_tokens


def context_error(limit: int, prompt_tokens: int, requested: int, param: str) -> OrchestratorError:
    return OrchestratorError(
        ErrorCode.INVALID_ARGUMENT,
        f"This model's maximum context length is {limit} tokens. However, you requested "
        f"{prompt_tokens + requested} tokens ({prompt_tokens} in the prompt, {requested} for the "
        "completion). Please reduce the length of the prompt or completion.",
        param=param,
    )


def plan_request(
    *,
    prompt_tokens: int,
    limits: Limits,
    max_model_len: int,
    sampler: WorkloadSampler,
    seeds: random.Random,
    param: str,
    tool: FunctionTool | None = None,
) -> Plan:
    """Apply vLLM's length rules, draw the natural length, split off the reasoning, place the
    tool call or find the first stop string. Raises INVALID_ARGUMENT past the context."""
    requested = limits.max_tokens
    if prompt_tokens + (requested or 0) > max_model_len or prompt_tokens >= max_model_len:
        raise context_error(max_model_len, prompt_tokens, requested or 0, param)
    max_tokens = requested or max_model_len - prompt_tokens
    rng = random.Random(limits.seed if limits.seed is not None else seeds.getrandbits(63))
    drawn = max(limits.min_tokens, sampler.output_length(rng), 1)
    split = split_output(sampler.stats, drawn, limits.reasoning_effort)
    reasoning, answer = split.reasoning_tokens, split.answer_tokens
    text_seed, reasoning_seed = rng.getrandbits(63), rng.getrandbits(63)
    call = None
    if tool is not None:
        call = ToolCall(tool.name, json.dumps(arguments_for(tool.parameters, rng)))
        answer = max(1, text_tokens(call.arguments)) + CALL_OVERHEAD_TOKENS
    elif limits.ignore_eos:
        answer = max(1, max_tokens - reasoning)
    natural = reasoning + answer
    output = min(max_tokens, natural)
    reasoning = min(reasoning, output)
    if call is not None and output == natural:
        return Plan(
            prompt_tokens, output, "tool_calls", text_seed, None, reasoning, reasoning_seed, call
        )
    reason = "length" if natural >= max_tokens else "stop"
    keep_chars = None
    if call is None and limits.stops:
        stop = TextWriter(text_seed).first_stop(limits.stops, output - reasoning)
        if stop is not None and reasoning + stop[0] >= limits.min_tokens:
            output, keep_chars, reason = reasoning + stop[0], stop[1], "stop"
    return Plan(prompt_tokens, output, reason, text_seed, keep_chars, reasoning, reasoning_seed)


@dataclass(frozen=True, slots=True)
class Pieces:
    """What the output grew by: reasoning text, answer text, function-call argument text."""

    reasoning: str = ""
    content: str = ""
    arguments: str = ""


class OutputStream:
    """Hands out the text of a growing token count: reasoning, then the answer (cut before a stop
    string if there is one) or the call's arguments, in proportion to the call's tokens."""

    def __init__(self, plan: Plan) -> None:
        self._plan = plan
        self._reasoning = TextWriter(plan.reasoning_seed)
        self._answer = TextWriter(plan.text_seed)
        self._tokens = 0
        self._chars = 0
        self._argument_chars = 0

    def advance(self, count: int) -> Pieces:
        plan = self._plan
        before, self._tokens = self._tokens, max(self._tokens, count)
        split = plan.reasoning_tokens
        reasoning = "".join(self._reasoning.tokens(min(before, split), min(count, split)))
        start, end = max(0, before - split), max(0, count - split)
        if plan.tool_call is not None:
            arguments = plan.tool_call.arguments
            upto = len(arguments) * end // max(1, plan.answer_tokens)
            piece, self._argument_chars = arguments[self._argument_chars : upto], upto
            return Pieces(reasoning=reasoning, arguments=piece)
        text = "".join(self._answer.tokens(start, end)) if end > start else ""
        if plan.keep_chars is not None:
            text = text[: max(0, plan.keep_chars - self._chars)]
        self._chars += len(text)
        return Pieces(reasoning=reasoning, content=text)

    def whole(self) -> Pieces:
        """Everything, for an answer that is not streamed."""
        return self.advance(self._plan.output_tokens)
