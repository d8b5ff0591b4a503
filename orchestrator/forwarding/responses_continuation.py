"""Mid-stream migration of a Responses API stream: what the client has been sent
(`ResponsesTranscript`), the chat completions request that continues it on another replica (what
vLLM offers for it: `responses_continuation_body`) and the rendering of that chat stream as the
rest of the client's Responses stream (`ResponsesSplicer`).

The client sees one stream: the first attempt's response (id, `created_at`, model), the items
already open go on under their ids and indexes, `sequence_number` goes on by one, and the closing
events and the one terminal event are the shared builder's (`core/response_events.py`), whose
response holds the whole items and a usage whose output tokens add the ones sent before the
move (counted as delta events, one token each) to the continuation's, and whose input tokens are
the continuation's prompt less those.

A request's function tools go along (as chat tools), and a call the continuation makes is
rendered as a function_call item. Not continuable (`NotContinuable`): a function call already in
the output (a chat continuation cannot extend one), tools other than functions, a structured
`text.format`, input items other than text messages (function calls and their outputs,
reasoning, images, files), no tokens left to ask for. A stream cut while an item was
closing goes on with the rest of its closing events. Transport-free and pure.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from orchestrator.core.errors import ErrorCode
from orchestrator.core.openai_errors import code_of_status
from orchestrator.core.response_events import ResponseEvents, new_id, sse_event
from orchestrator.forwarding.continuation import EVENT_END, NotContinuable, sse_payload

_DONE: Final = b"[DONE]"
_TERMINAL: Final = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "error"}
)
_DELTAS: Final = ("response.output_text.delta", "response.reasoning_text.delta")
_CLOSING: Final = frozenset(
    {"response.output_text.done", "response.reasoning_text.done", "response.content_part.done"}
)
_MESSAGE_ROLES: Final = frozenset({"user", "system", "developer", "assistant"})
_TEXT_PARTS: Final = frozenset({"input_text", "output_text", "text"})
_REASONING_KEYS: Final = ("reasoning", "reasoning_content")
# Sampling fields a chat continuation takes as they are (vLLM's extras included).
_SAMPLING: Final = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "ignore_eos",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
    "user",
)


@dataclass(slots=True)
class ResponsesTranscript:
    """What the client has been sent: the response, its items as they grew, the last number.

    Fed whole events only (a relay holds back a partial one). `blocker` says why the stream
    cannot be continued; None: it can.
    """

    response: dict[str, Any] | None = None
    items: list[dict[str, Any]] = field(default_factory=list)
    open_item: bool = False  # the last item has not been closed
    closing_sent: int = 0  # closing events of that item sent (its text's done, its part's)
    sequence: int = -1
    output_events: int = 0
    reasoning_events: int = 0
    blocker: str | None = None

    def feed(self, data: bytes) -> None:
        for event in data.split(EVENT_END):
            payload = sse_payload(event)
            if payload is None:
                continue
            try:
                parsed = json.loads(payload)
            except ValueError:
                self.blocker = "the replica sent an event that is not JSON"
                continue
            if isinstance(parsed, dict):
                try:
                    self._take(parsed)
                except (LookupError, TypeError, AttributeError):
                    self.blocker = "an event names an item or part that was not announced"

    def _take(self, event: dict[str, Any]) -> None:
        number = event.get("sequence_number")
        if isinstance(number, int):
            self.sequence = number
        kind = event.get("type")
        if kind in _TERMINAL:
            self.blocker = "the stream already ended"
        elif kind == "response.created":
            self.response = copy.deepcopy(event["response"])
        elif kind == "response.output_item.added":
            item = copy.deepcopy(event["item"])
            if item.get("type") not in ("message", "reasoning"):
                self.blocker = f"a {item.get('type')} item was being streamed"
            self.items.append(item)
            self.open_item, self.closing_sent = True, 0
        elif kind == "response.content_part.added":
            self.items[event["output_index"]]["content"].append(copy.deepcopy(event["part"]))
        elif kind in _DELTAS:
            part = self.items[event["output_index"]]["content"][event["content_index"]]
            part["text"] += event["delta"]
            self.output_events += 1
            self.reasoning_events += kind == "response.reasoning_text.delta"
        elif kind == "response.function_call_arguments.delta":
            self.output_events += 1
        elif kind in _CLOSING:
            self.closing_sent += 1
        elif kind == "response.output_item.done":
            self.items[event["output_index"]] = copy.deepcopy(event["item"])
            self.open_item, self.closing_sent = False, 0

    def texts(self) -> tuple[str, str]:
        """The reasoning and the answer sent so far."""
        reasoning: list[str] = []
        answer: list[str] = []
        for item in self.items:
            into = reasoning if item.get("type") == "reasoning" else answer
            into += [part.get("text", "") for part in item.get("content") or ()]
        return "".join(reasoning), "".join(answer)

    def continuation(self, request: bytes) -> bytes:
        return responses_continuation_body(request, self)

    def splicer(self, request: bytes) -> ResponsesSplicer:
        return ResponsesSplicer(self)


def responses_continuation_body(request: bytes, transcript: ResponsesTranscript) -> bytes:
    """The chat completions request that continues `transcript` (the answer to `request`, the
    client's Responses body). Raises `NotContinuable` when it cannot be (see the module doc)."""
    if transcript.blocker is not None:
        raise NotContinuable(transcript.blocker)
    if transcript.response is None:
        raise NotContinuable("the response was not announced yet")
    try:
        body = json.loads(request)
    except ValueError:
        raise NotContinuable("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise NotContinuable("the request body is not an object")
    text = body.get("text")
    text_format = text.get("format") if isinstance(text, dict) else None
    if isinstance(text_format, dict) and text_format.get("type", "text") != "text":
        raise NotContinuable("a structured text.format")
    reasoning, answer = transcript.texts()
    final: dict[str, Any] = {"role": "assistant", "content": answer}
    if reasoning:
        final["reasoning"] = reasoning
    chat: dict[str, Any] = {
        "model": body.get("model"),
        "messages": [*_messages(body), final],
        "add_generation_prompt": False,
        "continue_final_message": True,
        "stream": True,
        "stream_options": {"include_usage": True},  # the render needs the continuation's count
    }
    if body.get("tools"):
        chat["tools"] = _chat_tools(body["tools"])
        chat["tool_choice"] = _chat_tool_choice(body.get("tool_choice") or "auto")
        if isinstance(body.get("parallel_tool_calls"), bool):
            chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    effort = _effort(body) or _effort(transcript.response)  # the effort the replica used
    if effort is not None:
        chat["reasoning_effort"] = effort
    sent = transcript.output_events
    limit = body.get("max_output_tokens")
    if isinstance(limit, int):
        if limit - sent < 1:
            raise NotContinuable("no tokens are left to ask for")
        chat["max_completion_tokens"] = limit - sent
    chat.update((name, body[name]) for name in _SAMPLING if name in body)
    if isinstance(body.get("min_tokens"), int):
        chat["min_tokens"] = max(0, body["min_tokens"] - sent)
    return json.dumps(chat, separators=(",", ":")).encode()


def _chat_tools(tools: Any) -> list[dict[str, Any]]:
    """Responses function tools as chat tools (the function's fields one level down)."""
    converted = []
    for tool in tools if isinstance(tools, list) else ():
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function" or not isinstance(tool.get("name"), str):
            raise NotContinuable(f"a tool of type `{kind}` (only functions convert)")
        function = {
            k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool
        }
        converted.append({"type": "function", "function": function})
    return converted


def _chat_tool_choice(choice: Any) -> str | dict[str, Any]:
    if isinstance(choice, str):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise NotContinuable("a tool_choice other than a mode or a function")


def _effort(holder: Mapping[str, Any]) -> str | None:
    reasoning = holder.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, Mapping) else None
    return effort if isinstance(effort, str) else None


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The instructions and input as chat messages (the instructions as the developer's)."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "developer", "content": instructions})
    given = body.get("input")
    if isinstance(given, str):
        return [*messages, {"role": "user", "content": given}]
    if not isinstance(given, list):
        raise NotContinuable("no input")
    for item in given:
        if not isinstance(item, dict):
            raise NotContinuable("an input item that is not an object")
        kind = item.get("type", "message")
        role = item.get("role")
        if kind != "message" or role not in _MESSAGE_ROLES:
            raise NotContinuable(f"an input item of type `{kind}` (only text messages convert)")
        messages.append({"role": role, "content": _text_of(item.get("content"))})
    return messages


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise NotContinuable("a message without content")
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in _TEXT_PARTS or not isinstance(part.get("text"), str):
            raise NotContinuable(f"input content of type `{kind}` (only text converts)")
        texts.append(part["text"])
    return "".join(texts)


class ResponsesSplicer:
    """Renders a chat continuation's SSE bytes as the rest of the client's Responses stream.

    `feed` takes bytes as they arrive and returns whole rendered events (b"" when none is whole
    yet), led by the rest of the closing events of an item the first attempt was closing; `rest`
    has nothing to return: a partial chat event has no Responses rendering.
    """

    __slots__ = (
        "_builder", "_call", "_carry", "_ended", "_finish", "_pending", "_reasoning", "_sent",
        "_usage",
    )  # fmt: skip

    def __init__(self, transcript: ResponsesTranscript) -> None:
        assert transcript.response is not None
        body = copy.deepcopy(transcript.response)
        body["output"] = copy.deepcopy(transcript.items)
        closed = transcript.closing_sent  # numbered again as they were, then left out
        self._builder = ResponseEvents(body, sequence=transcript.sequence + 1 - closed)
        self._builder.resume(transcript.open_item)
        closing = self._builder.close()[closed:] if closed else []
        self._pending = b"".join(map(sse_event, closing))
        self._sent = transcript.output_events
        self._reasoning = transcript.reasoning_events  # reasoning deltas, sent and rendered
        self._finish: str | None = None
        self._call: int | None = None  # the index of the tool call being rendered
        self._usage: dict[str, Any] | None = None
        self._ended = False
        self._carry = b""

    def feed(self, data: bytes) -> bytes:
        pending, self._pending = self._pending, b""
        data = self._carry + data
        cut = data.rfind(EVENT_END)
        if cut < 0:
            self._carry = data
            return pending
        self._carry = data[cut + 2 :]
        return pending + b"".join(self._render(event) for event in data[:cut].split(EVENT_END))

    def rest(self) -> bytes:
        self._carry = b""
        return b""

    def _render(self, event: bytes) -> bytes:
        payload = sse_payload(event)
        if payload is None or self._ended:
            return b""
        if payload == _DONE:
            self._ended = True
            return b"".join(map(sse_event, self._end()))
        try:
            chunk = json.loads(payload)
        except ValueError:
            chunk = {"error": {"message": "the continuation sent an event that is not JSON"}}
        if not isinstance(chunk, dict) or "error" in chunk:
            self._ended = True
            return sse_event(self._error(chunk.get("error") if isinstance(chunk, dict) else None))
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        events = []
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                delta = {}
            reasoning = next((delta[k] for k in _REASONING_KEYS if delta.get(k)), "")
            self._reasoning += bool(reasoning)
            if reasoning or delta.get("content"):
                self._call = None  # a call after this text is a new item
            events += self._builder.add(reasoning=reasoning, content=delta.get("content") or "")
            for call in delta.get("tool_calls") or ():
                events += self._tool_call(call)
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]
        return b"".join(map(sse_event, events))

    def _tool_call(self, call: Any) -> list[dict[str, Any]]:
        """A chat tool call's delta as function_call events (a new index: a new item)."""
        if not isinstance(call, dict):
            return []
        function = call.get("function")
        if not isinstance(function, dict):
            function = {}
        events = []
        if call.get("index", 0) != self._call:
            self._call = call.get("index", 0)
            events += self._builder.close()
            self._builder.call_name = str(function.get("name") or "")
            self._builder.call_id = str(call.get("id") or new_id("call"))
            events += self._builder.into("function_call")
        return events + self._builder.add(arguments=function.get("arguments") or "")

    def _end(self) -> list[dict[str, Any]]:
        usage = None if self._usage is None else self._moved_usage(self._usage)
        if self._finish == "length":
            return self._builder.end("incomplete", usage, {"reason": "max_output_tokens"})
        return self._builder.end("completed", usage)

    def _moved_usage(self, usage: Mapping[str, Any]) -> dict[str, Any]:
        prompt = max(0, int(usage.get("prompt_tokens", 0)) - self._sent)
        output = int(usage.get("completion_tokens", 0)) + self._sent
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": min(cached, prompt)},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": self._reasoning},
            "total_tokens": prompt + output,
        }

    def _error(self, error: Any) -> dict[str, Any]:
        """The `error` event for a continuation's error chunk, in the router's own terms: the
        canonical code of the HTTP status the chunk carries (the gRPC front end reads it back)."""
        details = error if isinstance(error, dict) else {}
        status = details.get("code")
        code = code_of_status(status) if isinstance(status, int) else ErrorCode.UNAVAILABLE
        return self._builder.event(
            "error",
            code=code.value,
            message=str(details.get("message") or "the continuation failed"),
            param=details.get("param"),
        )
