"""Mid-stream migration as data: the transcript of what a client was sent, the continuation
request built from it, and the splice of the continuation's events into the client's stream."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.forwarding.continuation import (
    NotContinuable,
    Splicer,
    Transcript,
    continuation_body,
)


def event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def chat_chunk(delta: dict[str, Any], finish: str | None = None, **envelope: Any) -> bytes:
    fields = {"id": "chatcmpl-first", "created": 100, "model": "m", **envelope}
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return event({**fields, "object": "chat.completion.chunk", "choices": [choice]})


def events_of(data: bytes) -> list[Any]:
    out = []
    for raw in data.split(b"\n\n"):
        if raw:
            payload = raw.removeprefix(b"data: ")
            out.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
    return out


CHAT_REQUEST = json.dumps(
    {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 10,
        "min_tokens": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
        "seed": 3,
    }
).encode()


def sent_chat() -> Transcript:
    transcript = Transcript(chat=True)
    transcript.feed(
        chat_chunk({"role": "assistant", "content": ""})
        + chat_chunk({"reasoning": " think"})
        + chat_chunk({"content": " the"})
        + chat_chunk({"content": " router"})
    )
    return transcript


def test_a_chat_continues_as_a_final_assistant_message_with_the_tokens_left() -> None:
    body = json.loads(continuation_body(CHAT_REQUEST, sent_chat()))
    assert body["messages"][-1] == {
        "role": "assistant",
        "content": " the router",
        "reasoning": " think",
    }
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["max_tokens"] == 7 and body["min_tokens"] == 1  # three output events were sent
    assert body["seed"] == 3 and body["stream_options"]["include_usage"] is True


def test_a_text_completion_continues_with_the_extended_prompt() -> None:
    request = json.dumps({"prompt": ["Say"], "max_tokens": 5, "stream": True}).encode()
    transcript = Transcript(chat=False)
    chunk = {"id": "cmpl-1", "created": 1, "model": "m", "object": "text_completion"}
    transcript.feed(event({**chunk, "choices": [{"index": 0, "text": " hello"}]}))
    body = json.loads(continuation_body(request, transcript))
    assert body["prompt"] == "Say hello" and body["max_tokens"] == 4
    assert body["stream_options"] == {"include_usage": True}  # the splice needs the count


@pytest.mark.parametrize(
    ("request_body", "sent", "why"),
    [
        (CHAT_REQUEST, chat_chunk({"tool_calls": [{"index": 0}]}), "tool call"),
        (CHAT_REQUEST, chat_chunk({"content": "x"}, finish="stop"), "finished"),
        (CHAT_REQUEST, b"data: [DONE]\n\n", "ended"),
        (json.dumps({"messages": [], "n": 2}).encode(), chat_chunk({"content": "x"}), "choice"),
        (
            json.dumps({"messages": [], "max_tokens": 1}).encode(),
            chat_chunk({"content": "x"}),
            "left",
        ),
        (json.dumps({"messages": [], "echo": True}).encode(), chat_chunk({"content": "x"}), "echo"),
        (
            json.dumps({"messages": [], "response_format": {"type": "json_object"}}).encode(),
            chat_chunk({"content": "{"}),
            "constrained output \\(response_format\\)",
        ),
        (
            json.dumps({"messages": [], "guided_regex": "[a-z]+"}).encode(),
            chat_chunk({"content": "x"}),
            "guided_regex",
        ),
    ],
)
def test_what_cannot_be_continued_is_refused_with_its_reason(
    request_body: bytes, sent: bytes, why: str
) -> None:
    transcript = Transcript(chat=True)
    transcript.feed(sent)
    with pytest.raises(NotContinuable, match=why):
        continuation_body(request_body, transcript)


def test_the_splice_keeps_the_first_envelope_drops_the_second_role_and_adds_up_the_usage() -> None:
    splicer = Splicer(sent_chat(), CHAT_REQUEST)
    other = {"id": "chatcmpl-second", "created": 200, "model": "m"}
    continuation = (
        chat_chunk({"role": "assistant", "content": ""}, **other)
        + chat_chunk({"content": " spreads"}, **other)
        + chat_chunk({}, finish="length", **other)
    )
    usage = {"prompt_tokens": 15, "completion_tokens": 4, "total_tokens": 19}
    tail = event({**other, "choices": [], "usage": usage}) + b"data: [DONE]\n\n"
    cut = len(continuation) - 7  # an event split across reads is held until it is whole
    out = splicer.feed(continuation[:cut]) + splicer.feed(continuation[cut:] + tail)
    chunks = events_of(out)
    assert chunks[-1] == "[DONE]"
    assert all(c["id"] == "chatcmpl-first" and c["created"] == 100 for c in chunks[:-1])
    deltas = [c["choices"][0]["delta"] for c in chunks[:-1] if c["choices"]]
    assert deltas == [{"content": " spreads"}, {}]  # no second role delta
    assert chunks[-2]["usage"] == {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}


def test_the_splice_drops_the_usage_the_client_did_not_ask_for() -> None:
    request = json.dumps({"messages": [], "stream": True}).encode()
    splicer = Splicer(sent_chat(), request)
    usage = {"prompt_tokens": 15, "completion_tokens": 4, "total_tokens": 19}
    out = splicer.feed(event({"id": "x", "choices": [], "usage": usage}) + b"data: [DONE]\n\n")
    assert events_of(out) == ["[DONE]"]


def test_a_plain_text_response_format_still_continues() -> None:
    request = json.dumps(
        {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "text"}}
    ).encode()
    transcript = Transcript(chat=True)
    transcript.feed(chat_chunk({"role": "assistant", "content": "Hel"}))
    body = json.loads(continuation_body(request, transcript))
    assert body["messages"][-1] == {"role": "assistant", "content": "Hel"}
