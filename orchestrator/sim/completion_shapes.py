"""The bodies and SSE chunks of chat and text completions, as vLLM shapes them."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from orchestrator.sim.planning import Pieces, Plan, ToolCall


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def usage(plan: Plan, skip: int = 0) -> dict[str, int]:
    """The usage of `plan`, less the `skip` tokens a continuation was given (counted as prompt)."""
    prompt, completion = plan.prompt_tokens + skip, plan.output_tokens - skip
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def tool_call_entry(call: ToolCall, call_id: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


class CompletionShape:
    """The shape differences between chat and text completions, in one place each."""

    def __init__(self, chat: bool, model: str) -> None:
        self.chat = chat
        self.model = model
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.call_id = "chatcmpl-tool-" + uuid.uuid4().hex
        self.created = int(time.time())

    def _envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def whole(self, pieces: Pieces, plan: Plan, skip: int = 0) -> dict[str, Any]:
        if self.chat:
            call = plan.tool_call
            message = {
                "role": "assistant",
                "content": None if call is not None else pieces.content,
                "reasoning": pieces.reasoning or None,
                "tool_calls": [] if call is None else [tool_call_entry(call, self.call_id)],
            }
            choice = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": plan.finish_reason,
            }
            body = self._envelope("chat.completion", [choice])
        else:
            choice = {
                "index": 0,
                "text": pieces.reasoning + pieces.content,
                "logprobs": None,
                "finish_reason": plan.finish_reason,
            }
            body = self._envelope("text_completion", [choice])
        body["usage"] = usage(plan, skip)
        return body

    def chunk(
        self,
        pieces: Pieces,
        finish_reason: str | None,
        *,
        first: bool = False,
        call: ToolCall | None = None,
    ) -> dict[str, Any]:
        """One streamed chunk; `call` set opens the function call (its name, empty arguments)."""
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
            if pieces.reasoning:
                delta["reasoning"] = pieces.reasoning
            if pieces.content:
                delta["content"] = pieces.content
            if call is not None:
                opened = tool_call_entry(ToolCall(call.name, ""), self.call_id)
                delta["tool_calls"] = [{"index": 0, **opened}]
            elif pieces.arguments:
                delta["tool_calls"] = [{"index": 0, "function": {"arguments": pieces.arguments}}]
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            return self._envelope("chat.completion.chunk", [choice])
        text = pieces.reasoning + pieces.content
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return self._envelope("text_completion", [choice])

    def usage_chunk(self, plan: Plan, skip: int = 0) -> dict[str, Any]:
        body = self._envelope("chat.completion.chunk" if self.chat else "text_completion", [])
        body["usage"] = usage(plan, skip)
        return body
