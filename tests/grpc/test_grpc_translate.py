"""GenerateRequest to OpenAI JSON, and OpenAI SSE bytes to GenerateResponse, without sockets."""

from __future__ import annotations

import json

import grpc
import pytest

from orchestrator._proto.orchestrator.router.v1 import router_pb2 as pb
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.openai_errors import openai_error
from orchestrator.frontends.grpc.errors import GRPC_STATUS, grpc_status
from orchestrator.frontends.grpc.responses import responses_upstream
from orchestrator.frontends.grpc.translate import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    ResponseStream,
    to_upstream,
)
from orchestrator.routing.context import Priority

MODEL = "openai/gpt-oss-120b"
pytestmark = pytest.mark.timeout(30)


def _chat(**fields: object) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        model=MODEL, messages=[pb.ChatMessage(role="user", content="hello there")], **fields
    )


def _invalid_field(request: pb.GenerateRequest) -> str | None:
    with pytest.raises(OrchestratorError) as caught:
        to_upstream(request)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.param is not None
    assert caught.value.param in caught.value.message
    return caught.value.param


def test_a_chat_becomes_a_streamed_chat_completion_with_usage() -> None:
    upstream = to_upstream(
        _chat(max_tokens=16, temperature=0.5, top_p=0.9, seed=3, stop=["\n"], ignore_eos=True)
    )
    assert upstream.path == CHAT_PATH
    assert json.loads(upstream.body) == {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 16,
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 3,
        "stop": ["\n"],
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert upstream.context.model == MODEL
    assert upstream.context.max_tokens == 16
    assert upstream.context.stream
    assert upstream.context.prompt_tokens >= 1


def test_a_prompt_or_token_ids_become_a_text_completion() -> None:
    text = to_upstream(pb.GenerateRequest(model=MODEL, prompt="Once upon a time"))
    assert text.path == COMPLETIONS_PATH
    assert json.loads(text.body)["prompt"] == "Once upon a time"
    ids = to_upstream(pb.GenerateRequest(model=MODEL, prompt_token_ids=[1, 2, 3]))
    assert json.loads(ids.body)["prompt"] == [1, 2, 3]
    assert ids.context.prompt_tokens == 3


def test_unset_sampling_fields_are_left_to_the_engine() -> None:
    body = json.loads(to_upstream(_chat()).body)
    assert set(body) == {"model", "messages", "stream", "stream_options"}


def test_gpt_oss_fields_pass_through_unchanged() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = json.loads(
        to_upstream(_chat(reasoning_effort="high", tools_json=json.dumps(tools))).body
    )
    assert body["reasoning_effort"] == "high"
    assert body["tools"] == tools


def test_priority_and_client_site_reach_the_routing_context() -> None:
    assert to_upstream(_chat()).context.priority is Priority.INTERACTIVE
    batch = to_upstream(_chat(priority=pb.PRIORITY_BATCH, client_site="us-east"))
    assert batch.context.priority is Priority.BATCH
    assert batch.context.client_site == "us-east"
    assert to_upstream(_chat()).context.client_site is None


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.GenerateRequest(prompt="x"), "model"),
        (pb.GenerateRequest(model=MODEL), "messages"),
        (pb.GenerateRequest(model=MODEL, prompt="x", prompt_token_ids=[1]), "prompt_token_ids"),
        (_chat(prompt="x"), "prompt"),
        (_chat(max_tokens=0), "max_tokens"),
        (_chat(max_tokens=-5), "max_tokens"),
        (_chat(temperature=2.5), "temperature"),
        (_chat(temperature=float("nan")), "temperature"),
        (_chat(top_p=0.0), "top_p"),
        (_chat(tools_json="{not json"), "tools_json"),
        (_chat(tools_json='{"type": "function"}'), "tools_json"),
        (_chat(tools_json="[" * 100_000), "tools_json"),
        (_chat(priority=7), "priority"),  # type: ignore[arg-type]
        (pb.GenerateRequest(model=MODEL, prompt="x", reasoning_effort="low"), "reasoning_effort"),
        (pb.GenerateRequest(model=MODEL, prompt="x", tools_json="[]"), "tools_json"),
        (
            pb.GenerateRequest(model=MODEL, messages=[pb.ChatMessage(role="robot", content="x")]),
            "messages[0].role",
        ),
    ],
)
def test_bad_requests_are_invalid_arguments_naming_the_field(
    request_: pb.GenerateRequest, field: str
) -> None:
    assert _invalid_field(request_) == field


def _sse(*events: object) -> bytes:
    return b"".join(
        b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n"
        for e in events
    )


def _chat_chunk(content: str | None = None, finish: str | None = None) -> dict[str, object]:
    delta = {} if content is None else {"content": content}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


USAGE = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}


def _collect(stream: ResponseStream, data: bytes, piece: int) -> list[pb.GenerateResponse]:
    out: list[pb.GenerateResponse] = []
    for start in range(0, len(data), piece):
        out += stream.feed(data[start : start + piece])
    return out + stream.finish()


@pytest.mark.parametrize("piece", [1, 3, 7, 10_000])
def test_sse_chunks_become_messages_whatever_the_byte_boundaries(piece: int) -> None:
    data = _sse(
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        _chat_chunk("Hel"),
        _chat_chunk("lo"),
        _chat_chunk(None, "stop"),
        USAGE,
        b"[DONE]",
    ).replace(b"\n\n", b"\r\n\r\n", 1)
    replica = pb.ReplicaInfo(id="r1", pool="us/MI355X/sim", generation="MI355X")
    messages = _collect(ResponseStream(replica), data, piece)
    assert [m.text for m in messages] == ["Hel", "lo", ""]
    assert [m.completion_tokens for m in messages] == [1, 2, 2]
    assert messages[0].replica == replica
    assert not any(m.HasField("replica") for m in messages[1:])
    last = messages[-1]
    assert last.finish_reason == "stop"
    assert last.usage == pb.Usage(prompt_tokens=5, completion_tokens=2)


def test_text_completion_chunks_reasoning_and_tool_calls_are_carried() -> None:
    calls = [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{}"}}]
    data = _sse(
        {"choices": [{"index": 0, "delta": {"reasoning_content": "think"}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": "tool_calls"}]},
    )
    messages = _collect(ResponseStream(), data, 10_000)
    assert messages[0].reasoning_text == "think"
    assert json.loads(messages[1].tool_calls_json) == calls
    assert messages[-1].finish_reason == "tool_calls"
    text = _sse({"choices": [{"index": 0, "text": "abc", "finish_reason": "length"}]})
    assert [m.text for m in _collect(ResponseStream(), text, 10_000)] == ["abc", ""]


def test_a_mid_stream_error_event_raises_its_canonical_error() -> None:
    _, body = openai_error(OrchestratorError(ErrorCode.UNAVAILABLE, "replica r1 went away"))
    stream = ResponseStream()
    with pytest.raises(OrchestratorError) as caught:
        stream.feed(_sse(_chat_chunk("a"), body))
    assert caught.value.code is ErrorCode.UNAVAILABLE
    assert "went away" in caught.value.message


@pytest.mark.parametrize(
    "data", [_sse(_chat_chunk("a")), b"data: {not json\n\n", b"data: [1]\n\n", b""]
)
def test_a_broken_or_truncated_stream_is_unavailable(data: bytes) -> None:
    stream = ResponseStream()
    with pytest.raises(OrchestratorError) as caught:
        _collect(stream, data, 10_000)
    assert caught.value.code is ErrorCode.UNAVAILABLE


def test_every_canonical_code_has_one_grpc_status() -> None:
    assert set(GRPC_STATUS) == set(ErrorCode)
    code, details = grpc_status(
        OrchestratorError(ErrorCode.NOT_FOUND, "no such tool", param="tools_json")
    )
    assert code is grpc.StatusCode.NOT_FOUND
    assert details == "tools_json: no such tool"


@pytest.mark.parametrize(
    ("proto", "body", "default", "expected"),
    [
        (pb.PRIORITY_UNSPECIFIED, {"priority": "batch"}, Priority.INTERACTIVE, Priority.BATCH),
        (pb.PRIORITY_UNSPECIFIED, {}, Priority.BATCH, Priority.BATCH),
        (pb.PRIORITY_UNSPECIFIED, {"priority": 3}, Priority.BATCH, Priority.BATCH),  # vLLM's own
        (pb.PRIORITY_BATCH, {}, Priority.INTERACTIVE, Priority.BATCH),
    ],
)
def test_a_create_response_priority_comes_from_the_body_when_the_proto_names_none(
    proto: int, body: dict[str, object], default: Priority, expected: Priority
) -> None:
    request = pb.CreateResponseRequest(
        request_json=json.dumps({"model": "m", "input": "x", **body}), priority=proto
    )
    upstream = responses_upstream(request, default_model=None, default_priority=default)
    assert upstream.context.priority is expected
