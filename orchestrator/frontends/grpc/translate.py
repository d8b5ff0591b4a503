"""Translation between the gRPC contract and the OpenAI wire format the replicas speak.

A `GenerateRequest` becomes one OpenAI request (`/v1/chat/completions` for messages,
`/v1/completions` for a prompt), always streamed with usage, plus the `RequestContext` routing
needs. The replica's SSE bytes become `GenerateResponse` messages. Both directions are pure, so
they are tested without sockets; `servicer.py` does the I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from orchestrator._proto.orchestrator.router.v1 import router_pb2 as pb
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.frontends.grpc.errors import error_from_event
from orchestrator.frontends.http.context import chat_prompt, completion_prompt
from orchestrator.routing.context import Priority, RequestContext

CHAT_PATH: Final = "/v1/chat/completions"
COMPLETIONS_PATH: Final = "/v1/completions"
ROLES: Final = frozenset({"system", "developer", "user", "assistant", "tool"})
PRIORITIES: Final = MappingProxyType(
    {
        pb.PRIORITY_UNSPECIFIED: Priority.INTERACTIVE,
        pb.PRIORITY_INTERACTIVE: Priority.INTERACTIVE,
        pb.PRIORITY_BATCH: Priority.BATCH,
    }
)
MAX_EVENT_BYTES: Final = 8 * 1024 * 1024
_UINT32_LIMIT: Final = 2**32


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    """What the dispatcher is asked to send: an OpenAI path and JSON body, and how to route it."""

    path: str
    body: bytes
    context: RequestContext


def _invalid(field: str, problem: str) -> OrchestratorError:
    return OrchestratorError(ErrorCode.INVALID_ARGUMENT, f"{field}: {problem}", param=field)


def _tools(raw: str) -> list[Any]:
    try:
        tools = json.loads(raw)
    except (ValueError, RecursionError) as error:
        raise _invalid("tools_json", f"not valid JSON ({error})") from None
    if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
        raise _invalid("tools_json", "must be a JSON array of tool objects, as OpenAI's `tools`")
    return tools


def _check_input(request: pb.GenerateRequest) -> None:
    inputs = [
        name
        for name, present in (
            ("messages", bool(request.messages)),
            ("prompt", bool(request.prompt)),
            ("prompt_token_ids", bool(request.prompt_token_ids)),
        )
        if present
    ]
    if not inputs:
        raise _invalid("messages", "set messages, prompt or prompt_token_ids; all are empty")
    if len(inputs) > 1:
        raise _invalid(inputs[1], f"set only one input; this request sets {' and '.join(inputs)}")
    for index, message in enumerate(request.messages):
        if message.role not in ROLES:
            raise _invalid(
                f"messages[{index}].role",
                f"{message.role!r} is not one of {', '.join(sorted(ROLES))}",
            )
    if not request.messages:
        for field in ("reasoning_effort", "tools_json"):
            if getattr(request, field):
                raise _invalid(field, "only applies to messages, not to a prompt")


def _sampling(request: pb.GenerateRequest) -> dict[str, Any]:
    """The optional sampling fields the client set, checked and in OpenAI's names."""
    fields: dict[str, Any] = {}
    if request.HasField("max_tokens"):
        if request.max_tokens <= 0:
            raise _invalid("max_tokens", f"must be > 0, got {request.max_tokens}")
        fields["max_tokens"] = request.max_tokens
    if request.HasField("temperature"):
        if not 0.0 <= request.temperature <= 2.0:
            raise _invalid("temperature", f"must be in [0, 2], got {request.temperature}")
        fields["temperature"] = request.temperature
    if request.HasField("top_p"):
        if not 0.0 < request.top_p <= 1.0:
            raise _invalid("top_p", f"must be in (0, 1], got {request.top_p}")
        fields["top_p"] = request.top_p
    if request.HasField("seed"):
        fields["seed"] = request.seed
    if request.stop:
        fields["stop"] = list(request.stop)
    if request.ignore_eos:
        fields["ignore_eos"] = True
    return fields


def to_upstream(request: pb.GenerateRequest) -> UpstreamRequest:
    """Validate a request and translate it; raises INVALID_ARGUMENT naming the first bad field.

    The routing context is estimated exactly as the HTTP frontend estimates it (same token
    estimate, same prefix hash), so a prompt routes alike whichever frontend it came through.
    """
    if not request.model:
        raise _invalid("model", "required (e.g. openai/gpt-oss-120b)")
    _check_input(request)
    priority = PRIORITIES.get(request.priority)
    if priority is None:
        raise _invalid("priority", f"unknown value {request.priority}")
    body: dict[str, Any] = {"model": request.model}
    if request.messages:
        path = CHAT_PATH
        body["messages"] = [{"role": m.role, "content": m.content} for m in request.messages]
        if request.reasoning_effort:
            body["reasoning_effort"] = request.reasoning_effort
        if request.tools_json:
            body["tools"] = _tools(request.tools_json)
    else:
        path = COMPLETIONS_PATH
        body["prompt"] = request.prompt or list(request.prompt_token_ids)
    body.update(_sampling(request))
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    prompt_tokens, prefix = (
        chat_prompt(body["messages"]) if request.messages else completion_prompt(body["prompt"])
    )
    context = RequestContext(
        model=request.model,
        prompt_tokens=prompt_tokens,
        max_tokens=body.get("max_tokens"),
        stream=True,
        prefix_hash=prefix,
        priority=priority,
        client_site=request.client_site or None,
    )
    encoded = json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return UpstreamRequest(path, encoded.encode(), context)


def _count(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _UINT32_LIMIT:
        return value
    return None


def _text(value: Any) -> str:
    """A string field of a chunk, or "" when absent; never one protobuf would refuse to encode."""
    if not isinstance(value, str):
        return ""
    try:
        value.encode()
    except UnicodeEncodeError:  # a lone surrogate from a `\\ud800` escape
        return value.encode(errors="replace").decode()
    return value


def _unavailable(problem: str) -> OrchestratorError:
    return OrchestratorError(ErrorCode.UNAVAILABLE, f"the replica {problem}")


class ResponseStream:
    """Turns the SSE bytes of one streamed OpenAI completion into `GenerateResponse` messages.

    Feed it the bytes as they arrive, in pieces of any size; each event with new text, reasoning or
    tool calls becomes one message. `finish()` returns the rest, ending with the message that
    carries the finish reason and usage. The replica's identity rides on the first message. A
    terminal error event raises its canonical error; a stream that stops early raises UNAVAILABLE.
    """

    def __init__(self, replica: pb.ReplicaInfo | None = None) -> None:
        self._replica = replica
        self._pending = b""
        self._data: list[bytes] = []
        self._tokens = 0
        self._finish_reason: str | None = None
        self._usage: pb.Usage | None = None
        self._done = False

    def feed(self, data: bytes) -> list[pb.GenerateResponse]:
        """The messages completed by `data`."""
        *lines, self._pending = (self._pending + data).split(b"\n")
        out = [message for line in lines if (message := self._line(line)) is not None]
        if len(self._pending) + sum(map(len, self._data)) > MAX_EVENT_BYTES:
            raise _unavailable(f"sent an event longer than {MAX_EVENT_BYTES} bytes")
        return out

    def finish(self) -> list[pb.GenerateResponse]:
        """The messages left once the stream ends, the last of which closes the completion.

        Raises UNAVAILABLE if the stream ended before the completion did.
        """
        lines, self._pending = (self._pending, b""), b""  # an unterminated last event counts
        out = [message for line in lines if (message := self._line(line)) is not None]
        if self._finish_reason is None and not self._done:
            raise _unavailable("ended the stream before the completion finished")
        last = pb.GenerateResponse(finish_reason=self._finish_reason or "")
        if self._usage is not None:
            last.usage.CopyFrom(self._usage)
            last.completion_tokens = self._usage.completion_tokens
        else:
            last.completion_tokens = self._tokens
        out.append(self._stamp(last))
        return out

    def _stamp(self, message: pb.GenerateResponse) -> pb.GenerateResponse:
        if self._replica is not None:
            message.replica.CopyFrom(self._replica)
            self._replica = None
        return message

    def _line(self, raw: bytes) -> pb.GenerateResponse | None:
        line = raw.rstrip(b"\r")
        if line.startswith(b"data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(b" ") else value)
        elif not line and self._data:
            data, self._data = b"\n".join(self._data), []
            return self._event(data)
        return None

    def _event(self, data: bytes) -> pb.GenerateResponse | None:
        if data.strip() == b"[DONE]":
            self._done = True
            return None
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            raise _unavailable("sent an event that is not JSON") from None
        if not isinstance(chunk, dict):
            raise _unavailable("sent an event that is not a JSON object")
        if "error" in chunk:
            raise error_from_event(chunk["error"])
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = pb.Usage(
                prompt_tokens=_count(usage.get("prompt_tokens")) or 0,
                completion_tokens=_count(usage.get("completion_tokens")) or 0,
            )
        choices = chunk.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):
            return None
        if isinstance(reason := choice.get("finish_reason"), str):
            self._finish_reason = _text(reason)
        return self._delta(choice)

    def _delta(self, choice: Mapping[str, Any]) -> pb.GenerateResponse | None:
        delta = choice.get("delta", choice.get("message"))  # a stream's delta, or a whole answer
        if isinstance(delta, dict):  # chat
            text = _text(delta.get("content"))
            reasoning = _text(delta.get("reasoning_content")) or _text(delta.get("reasoning"))
            calls = delta.get("tool_calls")
            tool_calls = json.dumps(calls, separators=(",", ":")) if calls else ""
        else:  # text completion
            text, reasoning, tool_calls = _text(choice.get("text")), "", ""
        if not (text or reasoning or tool_calls):
            return None
        self._tokens += 1
        message = pb.GenerateResponse(
            text=text,
            reasoning_text=reasoning,
            tool_calls_json=tool_calls,
            completion_tokens=self._tokens,
        )
        return self._stamp(message)
