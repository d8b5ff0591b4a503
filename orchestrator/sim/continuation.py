"""Requests that continue an answer already begun, as vLLM continues one: a chat whose final
assistant message is to be extended (`continue_final_message: true`; with
`add_generation_prompt: true` as well it is refused, as vLLM refuses it), or a text prompt that
ends with the start of what this replica would write for the same request and seed.

The simulated model writes a deterministic token sequence per request and seed; a continuation
given its first k tokens writes tokens k.. of that same sequence, so a stream moved between
replicas mid-way reads as one replica's. Its usage counts the k tokens as prompt, as vLLM's does
(the continued text is prompt to the engine), so prompt plus completion adds up to the whole.
With tools, the continued answer makes the call the whole one makes (`server.py` plans it so).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.sim.planning import Plan
from orchestrator.sim.protocol import ChatCompletionRequest
from orchestrator.sim.text import TextWriter, chat_prompt_tokens, text_tokens

_REASONING_FIELDS = ("reasoning", "reasoning_content")


@dataclass(frozen=True, slots=True)
class ContinuedChat:
    """A chat's final assistant message to extend: the prompt before it and its texts."""

    prompt_tokens: int
    reasoning: str
    content: str


def chat_continuation(body: ChatCompletionRequest) -> ContinuedChat | None:
    """The message to continue, None for a chat that asks for a new reply."""
    extra = body.model_extra or {}
    if extra.get("continue_final_message") is not True:
        return None
    if extra.get("add_generation_prompt") is True:
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
            param="continue_final_message",
        )
    final = body.messages[-1]
    if final.role != "assistant":
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            "`continue_final_message` needs a final assistant message to continue",
            param="messages",
        )
    final_extra = final.model_extra or {}
    reasoning = next((final_extra[k] for k in _REASONING_FIELDS if final_extra.get(k)), "")
    return ContinuedChat(
        prompt_tokens=chat_prompt_tokens([m.text() for m in body.messages[:-1]]),
        reasoning=reasoning if isinstance(reasoning, str) else "",
        content=final.text(),
    )


def _whole_tokens(writer: TextWriter, text: str) -> tuple[int, int]:
    """How many of `writer`'s tokens `text` starts with, and the characters they cover."""
    count = covered = 0
    while covered < len(text):
        (token,) = writer.tokens(count, count + 1)
        if not text.startswith(token, covered):
            break
        count, covered = count + 1, covered + len(token)
    return count, covered


def _given_tokens(writer: TextWriter, text: str) -> int:
    """Tokens `text` stands for: those of the sequence it repeats, then a text-length estimate
    of whatever does not (text this replica would not have written)."""
    count, covered = _whole_tokens(writer, text)
    rest = text[covered:]
    return count + (text_tokens(rest) if rest else 0)


def chat_skip(plan: Plan, continued: ContinuedChat) -> int:
    """Output tokens of `plan` the continued message already holds (at most all but one)."""
    reasoning = _given_tokens(TextWriter(plan.reasoning_seed), continued.reasoning)
    if continued.content:  # the answer began: the reasoning, whatever its text, is over
        reasoning = max(reasoning, plan.reasoning_tokens)
        answer = _given_tokens(TextWriter(plan.text_seed), continued.content)
    else:
        answer = 0
    return min(reasoning + answer, plan.output_tokens - 1)


def prompt_skip(plan: Plan, prompt: str) -> tuple[int, int]:
    """For a text prompt that ends with the first k tokens `plan` would write (after its
    reasoning), k and the characters they take at the prompt's end; (0, 0) when it does not."""
    if plan.reasoning_tokens or plan.tool_call is not None:
        return 0, 0
    writer = TextWriter(plan.text_seed)
    best = (0, 0)
    written = ""
    for count in range(1, plan.output_tokens):
        written += writer.tokens(count - 1, count)[0]
        if len(written) > len(prompt):
            break
        if prompt.endswith(written):
            best = (count, len(written))
    return best
