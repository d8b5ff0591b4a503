"""The Responses API over gRPC: `CreateResponseRequest` to an OpenAI `/v1/responses` request,
and the replica's event stream back as `ResponseEvent` messages. Pure, like `translate.py`.

The request body travels as JSON text and is forwarded as the client wrote it, with `stream`
set; it is read only for what routing needs (`frontends/http/context.py`, the same estimate as
over HTTP). Each SSE event (`event:` line, `data:` JSON) becomes one message carrying the event
unchanged; the terminal event also carries the usage. The router's own terminal `error` event
(the replica failed mid-stream, the deadline passed) raises its canonical error, so the client
gets a status code, as Generate's does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from orchestrator._proto.orchestrator.router.v1 import router_pb2 as pb
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.forwarding.event_stream import RESPONSES_PATH
from orchestrator.frontends.grpc.translate import MAX_EVENT_BYTES, PRIORITIES, UpstreamRequest
from orchestrator.frontends.http.context import responses_context
from orchestrator.routing.context import BUILTIN_LANES, Priority

TERMINAL_TYPES: Final = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "error"}
)
_CODES: Final = {code.value: code for code in ErrorCode}


def _invalid(field: str, problem: str) -> OrchestratorError:
    return OrchestratorError(ErrorCode.INVALID_ARGUMENT, f"{field}: {problem}", param=field)


def responses_upstream(
    request: pb.CreateResponseRequest,
    *,
    default_model: str | None,
    default_priority: Priority = Priority.INTERACTIVE,
    classes: Mapping[str, Priority] = BUILTIN_LANES,
) -> UpstreamRequest:
    """Validate and translate; raises INVALID_ARGUMENT naming the first bad field. An
    unspecified proto priority leaves the body's `priority` (any of `classes`), else
    `default_priority`."""
    try:
        body = json.loads(request.request_json, parse_constant=_no_constant)
    except (ValueError, RecursionError) as error:
        raise _invalid("request_json", f"not valid JSON ({error})") from None
    if not isinstance(body, dict):
        raise _invalid("request_json", "must be a JSON object: an OpenAI Responses request")
    unspecified = request.priority == pb.PRIORITY_UNSPECIFIED
    priority = default_priority if unspecified else PRIORITIES.get(request.priority)
    if priority is None:
        raise _invalid("priority", f"unknown value {request.priority}")
    body["stream"] = True
    headers = {"x-client-site": request.client_site} if request.client_site else {}
    context = responses_context(
        body, headers, default_model=default_model, default_priority=priority, classes=classes
    )
    # ASCII escapes keep a lone surrogate (`\ud800`, valid JSON) as the client wrote it.
    encoded = json.dumps(body, separators=(",", ":"), allow_nan=False)
    return UpstreamRequest(RESPONSES_PATH, encoded.encode(), context)


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _unavailable(problem: str) -> OrchestratorError:
    return OrchestratorError(ErrorCode.UNAVAILABLE, f"the replica {problem}")


class ResponseEventStream:
    """Turns the SSE bytes of one streamed response into `ResponseEvent` messages.

    Feed it bytes in pieces of any size; `finish()` raises UNAVAILABLE when the stream ended
    before its terminal event. The replica's identity rides on the first message.
    """

    def __init__(self, replica: pb.ReplicaInfo | None = None) -> None:
        self._replica = replica
        self._pending = b""
        self._type = ""
        self._data: list[bytes] = []
        self._ended = False

    def feed(self, data: bytes) -> list[pb.ResponseEvent]:
        *lines, self._pending = (self._pending + data).split(b"\n")
        out = [event for line in lines if (event := self._line(line)) is not None]
        if len(self._pending) + sum(map(len, self._data)) > MAX_EVENT_BYTES:
            raise _unavailable(f"sent an event longer than {MAX_EVENT_BYTES} bytes")
        return out

    def finish(self) -> list[pb.ResponseEvent]:
        lines, self._pending = (self._pending, b""), b""
        out = [event for line in lines if (event := self._line(line)) is not None]
        if not self._ended:
            raise _unavailable("ended the stream before the response finished")
        return out

    def _line(self, raw: bytes) -> pb.ResponseEvent | None:
        line = raw.rstrip(b"\r")
        if line.startswith(b"event:"):
            self._type = line[6:].strip().decode(errors="replace")
        elif line.startswith(b"data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(b" ") else value)
        elif not line and self._data:
            data, self._data = b"\n".join(self._data), []
            kind, self._type = self._type, ""
            return self._event(kind, data)
        return None

    def _event(self, kind: str, data: bytes) -> pb.ResponseEvent:
        try:
            event = json.loads(data)
        except (ValueError, RecursionError):
            raise _unavailable("sent an event that is not JSON") from None
        if not isinstance(event, dict):
            raise _unavailable("sent an event that is not a JSON object")
        kind = kind or str(event.get("type", ""))
        if kind == "error" and event.get("code") in _CODES:  # the router's own terminal error
            message = event.get("message")
            raise OrchestratorError(
                _CODES[event["code"]],
                message if isinstance(message, str) else "the stream failed",
            )
        if kind in TERMINAL_TYPES:
            self._ended = True
        message = pb.ResponseEvent(type=kind, event_json=data.decode(errors="replace"))
        usage = _usage(event)
        if usage is not None:
            message.usage.CopyFrom(usage)
        if self._replica is not None:
            message.replica.CopyFrom(self._replica)
            self._replica = None
        return message


def _usage(event: dict[str, Any]) -> pb.Usage | None:
    response = event.get("response")
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return None
    counts = [usage.get("input_tokens"), usage.get("output_tokens")]
    if not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 2**32 for c in counts):
        return None
    return pb.Usage(prompt_tokens=counts[0], completion_tokens=counts[1])
