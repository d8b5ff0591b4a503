"""Mid-stream migration of a Responses stream as data: the transcript of the events a client was
sent, the chat continuation built from it, and the rendering of that chat stream as the rest of
the client's Responses stream (checked against the official client's event types)."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from openai.types.responses import ResponseStreamEvent

from orchestrator.core.response_events import ResponseEvents, sse_event
from orchestrator.forwarding.continuation import NotContinuable
from orchestrator.forwarding.responses_continuation import (
    ResponsesSplicer,
    ResponsesTranscript,
    responses_continuation_body,
)

EVENTS = pydantic.TypeAdapter(ResponseStreamEvent)
REQUEST: dict[str, Any] = {
    "model": "m",
    "instructions": "Be brief.",
    "input": [
        {"role": "user", "content": "hi"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "yo"}],
        },
        {"role": "user", "content": [{"type": "input_text", "text": "capacity?"}]},
    ],
    "max_output_tokens": 20,
    "min_tokens": 2,
    "seed": 7,
    "temperature": 0.5,
    "stream": True,
}
Step = tuple[str, str]  # reasoning, content


def replica_response() -> dict[str, Any]:
    return {
        "id": "resp_first",
        "object": "response",
        "created_at": 100,
        "model": "m",
        "status": "in_progress",
        "output": [],
        "reasoning": {"effort": "low", "summary": None},
        "usage": None,
        "incomplete_details": None,
        "error": None,
        "tools": [],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "instructions": "Be brief.",
        "metadata": {},
    }


def first_attempt(steps: list[Step], close: bool = False) -> bytes:
    """What the first replica sent before it failed (`close`: it closed its open item)."""
    builder = ResponseEvents(replica_response())
    events = builder.start()
    for reasoning, content in steps:
        events += builder.add(reasoning, content)
    if close:
        events += builder.close()
    return b"".join(map(sse_event, events))


def chat_stream(steps: list[Step], finish: str, usage: dict[str, int]) -> bytes:
    envelope = {"id": "chatcmpl-second", "created": 200, "model": "m"}
    chunks = [{"role": "assistant", "content": ""}]
    chunks += [{"reasoning": r} if r else {"content": c} for r, c in steps]
    out = b""
    for index, delta in enumerate(chunks):
        last = index == len(chunks) - 1
        choice = {"index": 0, "delta": delta, "finish_reason": finish if last else None}
        out += b"data: " + json.dumps({**envelope, "choices": [choice]}).encode() + b"\n\n"
    out += b"data: " + json.dumps({**envelope, "choices": [], "usage": usage}).encode() + b"\n\n"
    return out + b"data: [DONE]\n\n"


def parsed(data: bytes) -> list[dict[str, Any]]:
    """Each SSE event's data, checked against the official client's event types (usage is
    checked by the tests)."""
    events = []
    for raw in data.split(b"\n\n"):
        if raw:
            kind, payload = raw.split(b"\n", 1)
            event = json.loads(payload.removeprefix(b"data: "))
            assert kind == b"event: " + event["type"].encode()
            checked = json.loads(json.dumps(event))
            if "response" in checked:  # the client's types know newer usage fields than vLLM's
                checked["response"]["usage"] = None
            EVENTS.validate_python(checked)
            events.append(event)
    return events


def transcript_of(sent: bytes) -> ResponsesTranscript:
    transcript = ResponsesTranscript()
    transcript.feed(sent)
    return transcript


@pytest.mark.parametrize(
    ("where", "sent", "close", "continued", "items"),
    [
        (
            "in the reasoning, which the continuation ends",
            [(" think", ""), (" more", "")],
            False,
            [(" harder", ""), ("", " The"), ("", " answer")],
            [("reasoning", " think more harder"), ("message", " The answer")],
        ),
        (
            "in the answer",
            [(" think", ""), ("", " The")],
            False,
            [("", " answer"), ("", ".")],
            [("reasoning", " think"), ("message", " The answer.")],
        ),
        (
            "between the reasoning and the answer",
            [(" think", "")],
            True,
            [("", " The")],
            [("reasoning", " think"), ("message", " The")],
        ),
    ],
)
def test_a_moved_stream_reads_as_one_response(
    where: str, sent: list[Step], close: bool, continued: list[Step], items: list[tuple[str, str]]
) -> None:
    before = first_attempt(sent, close)
    transcript = transcript_of(before)
    splicer = ResponsesSplicer(transcript)
    usage = {"prompt_tokens": 30 + len(sent), "completion_tokens": len(continued)}
    chat = chat_stream(continued, "stop", usage | {"total_tokens": 30 + len(sent + continued)})
    cut = len(chat) // 2  # an event split across reads is held until it is whole
    events = parsed(before + splicer.feed(chat[:cut]) + splicer.feed(chat[cut:]) + splicer.rest())
    assert [e["sequence_number"] for e in events] == list(range(len(events))), where
    assert [e["type"] for e in events].count("response.output_item.added") == len(items)
    terminal = events[-1]
    assert terminal["type"] == "response.completed"
    response = terminal["response"]
    assert (response["id"], response["created_at"], response["status"]) == (
        "resp_first",
        100,
        "completed",
    )
    output = response["output"]
    assert [(i["type"], i["content"][0]["text"]) for i in output] == items
    added = [e["item"]["id"] for e in events if e["type"] == "response.output_item.added"]
    assert [i["id"] for i in output] == added  # the items sent go on under their ids
    for event in events:
        if "item_id" in event:
            assert event["item_id"] == added[event["output_index"]]
    dones = [e for e in events if e["type"].endswith("_text.done")]
    assert [(d["output_index"], d["text"]) for d in dones] == [
        (n, text) for n, (_, text) in enumerate(items)
    ]
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.done"] == [
        0,
        1,
    ]
    moved = len(sent)
    reasoning = sum(bool(r) for r, _ in sent + continued)
    assert response["usage"] == {
        "input_tokens": 30,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": moved + len(continued),
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": 30 + moved + len(continued),
    }


def test_a_continuation_cut_by_its_limit_ends_the_response_incomplete() -> None:
    splicer = ResponsesSplicer(transcript_of(first_attempt([("", " a")])))
    usage = {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}
    events = parsed(splicer.feed(chat_stream([("", " b")], "length", usage)))
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == " a b"


def test_a_continuation_is_a_chat_that_extends_the_answer_with_the_tokens_left() -> None:
    transcript = transcript_of(first_attempt([(" think", ""), ("", " The")]))
    body = json.loads(responses_continuation_body(json.dumps(REQUEST).encode(), transcript))
    assert body["messages"] == [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
        {"role": "user", "content": "capacity?"},
        {"role": "assistant", "content": " The", "reasoning": " think"},
    ]
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["max_completion_tokens"] == 18 and body["min_tokens"] == 0  # two were sent
    assert (body["seed"], body["temperature"], body["model"]) == (7, 0.5, "m")
    assert body["reasoning_effort"] == "low"  # the effort the first replica announced
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    for odd in ({"text": "plain", "tool_choice": None}, {"text": {"format": None}}):  # as text
        responses_continuation_body(json.dumps(REQUEST | odd).encode(), transcript)


def function_call_sent() -> bytes:
    builder = ResponseEvents(replica_response())
    builder.call_name = "lookup"
    return b"".join(map(sse_event, builder.start() + builder.add(arguments='{"a"')))


@pytest.mark.parametrize(
    ("request_fields", "sent", "why"),
    [
        ({}, function_call_sent(), "function_call item"),
        ({"tools": [{"type": "web_search"}]}, first_attempt([("x", "")]), "web_search"),
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]},
            first_attempt([("x", "")]),
            "function_call_output",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
            first_attempt([("x", "")]),
            "input_image",
        ),
        ({"text": {"format": {"type": "json_object"}}}, first_attempt([("x", "")]), "format"),
        ({"max_output_tokens": 1}, first_attempt([("x", "")]), "left"),
        ({}, first_attempt([("x", "")], close=True)[:-60] + b"\n\n", "not JSON"),
        ({}, b"", "not announced"),
    ],
)
def test_what_cannot_be_continued_is_refused_with_its_reason(
    request_fields: dict[str, Any], sent: bytes, why: str
) -> None:
    with pytest.raises(NotContinuable, match=why):
        responses_continuation_body(
            json.dumps(REQUEST | request_fields).encode(), transcript_of(sent)
        )


def test_an_ended_stream_is_not_continued() -> None:
    builder = ResponseEvents(replica_response())
    events = builder.start() + builder.add("x") + builder.end("completed", None)
    with pytest.raises(NotContinuable, match="ended"):
        responses_continuation_body(
            json.dumps(REQUEST).encode(), transcript_of(b"".join(map(sse_event, events)))
        )


@pytest.mark.parametrize("closing_sent", [1, 2])
def test_a_stream_cut_while_an_item_was_closing_goes_on_with_the_rest_of_its_closing(
    closing_sent: int,
) -> None:
    builder = ResponseEvents(replica_response())
    events = builder.start() + builder.add(" think")
    closing = builder.close()  # the text's done, the part's done, the item's done
    sent = b"".join(map(sse_event, events + closing[:closing_sent]))
    splicer = ResponsesSplicer(transcript_of(sent))
    usage = {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}
    read = parsed(sent + splicer.feed(chat_stream([("", " The")], "stop", usage)))
    assert [e["sequence_number"] for e in read] == list(range(len(read)))
    assert [e["type"] for e in read[len(events) : len(events) + 3]] == [e["type"] for e in closing]
    output = read[-1]["response"]["output"]
    assert [(i["type"], i["content"][0]["text"]) for i in output] == [
        ("reasoning", " think"),
        ("message", " The"),
    ]


def test_an_error_from_the_continuation_ends_the_stream_with_the_next_numbered_error_event() -> (
    None
):
    transcript = transcript_of(first_attempt([("", " a")]))
    splicer = ResponsesSplicer(transcript)
    chunk = {"error": {"message": "engine died", "type": "InternalServerError", "code": 503}}
    events = parsed(splicer.feed(b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"))
    assert events == [
        {
            "type": "error",
            "sequence_number": transcript.sequence + 1,
            "code": "unavailable",
            "message": "engine died",
            "param": None,
        }
    ]


def test_function_tools_go_along_and_a_call_the_continuation_makes_is_a_function_call_item() -> (
    None
):
    tool = {"type": "function", "name": "capacity", "parameters": {"type": "object"}}
    request = REQUEST | {"tools": [tool], "tool_choice": {"type": "function", "name": "capacity"}}
    transcript = transcript_of(first_attempt([(" think", "")]))
    body = json.loads(responses_continuation_body(json.dumps(request).encode(), transcript))
    assert body["tools"] == [
        {"type": "function", "function": {"name": "capacity", "parameters": {"type": "object"}}}
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "capacity"}}
    splicer = ResponsesSplicer(transcript)
    calls = [
        {"index": 0, "id": "call_9", "type": "function", "function": {"name": "capacity"}},
        {"index": 0, "function": {"arguments": '{"site":'}},
        {"index": 0, "function": {"arguments": ' "a"}'}},
    ]
    envelope = {"id": "chatcmpl-second", "created": 200, "model": "m"}
    chunks = [{"reasoning": " more"}] + [{"tool_calls": [call]} for call in calls]
    chat = b"".join(
        b"data: "
        + json.dumps(
            {**envelope, "choices": [{"index": 0, "delta": d, "finish_reason": None}]}
        ).encode()
        + b"\n\n"
        for d in chunks
    )
    usage = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}
    chat += b"data: " + json.dumps({**envelope, "choices": [], "usage": usage}).encode() + b"\n\n"
    events = parsed(splicer.feed(chat + b"data: [DONE]\n\n"))
    assert [e["sequence_number"] for e in events] == list(
        range(transcript.sequence + 1, transcript.sequence + 1 + len(events))
    )
    (done,) = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert (done["name"], done["arguments"], done["output_index"]) == (
        "capacity",
        '{"site": "a"}',
        1,
    )
    output = events[-1]["response"]["output"]
    assert [i["type"] for i in output] == ["reasoning", "function_call"]
    assert output[0]["content"][0]["text"] == " think more"
    assert (output[1]["call_id"], output[1]["status"]) == ("call_9", "completed")
