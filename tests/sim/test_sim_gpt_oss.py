"""What gpt-oss traffic carries, from a simulated replica through the official `openai` client:
reasoning by effort, tool calls a client can answer, the Responses API with its stored
responses, and vLLM's tokenizer routes."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from replica_metrics import MODEL_NAME
from replica_server import ReplicaThread, replica

from orchestrator.core.generations import Generation
from orchestrator.sim.replica import ReplicaSettings

HELLO = [{"role": "user", "content": "What is the weather at the Seoul site?"}]
WEATHER = {
    "name": "get_weather",
    "description": "Weather at a site.",
    "parameters": {
        "type": "object",
        "properties": {
            "site": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
        },
        "required": ["site", "unit", "days"],
    },
}
CHAT_TOOL = {"type": "function", "function": WEATHER}
RESPONSES_TOOL = {"type": "function", **WEATHER}


@pytest.fixture(scope="module")
def sim() -> Iterator[ReplicaThread]:
    with replica(ReplicaSettings(Generation.MI355X, time_scale=0.0, seed=11)) as server:
        yield server


@pytest.fixture(scope="module")
def client(sim: ReplicaThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{sim.url}/v1", api_key="unused", max_retries=0)


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_chat_reasoning_grows_with_effort_and_counts_as_completion_tokens(
    client: openai.OpenAI,
) -> None:
    reasoning: dict[str, int] = {}
    for effort in ("low", "medium", "high"):
        reply = client.chat.completions.create(
            model=MODEL_NAME, messages=HELLO, reasoning_effort=effort, seed=5
        )
        message = reply.choices[0].message
        thought = getattr(message, "reasoning", None)
        assert thought and message.content
        assert reply.usage is not None
        assert reply.usage.completion_tokens == len(thought.split()) + len(message.content.split())
        reasoning[effort] = len(thought.split())
    assert reasoning["low"] < reasoning["medium"] < reasoning["high"]


def test_chat_without_effort_has_no_reasoning_channel(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model=MODEL_NAME, messages=HELLO, max_tokens=20)

    assert getattr(reply.choices[0].message, "reasoning", None) is None
    assert reply.choices[0].message.content


def test_chat_tool_round_trip_calls_the_tool_then_answers_its_result(
    client: openai.OpenAI,
) -> None:
    first = client.chat.completions.create(
        model=MODEL_NAME, messages=HELLO, tools=[CHAT_TOOL], reasoning_effort="low"
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    assert set(arguments) == {"site", "unit", "days"}
    assert arguments["unit"] in ("celsius", "fahrenheit") and 1 <= arguments["days"] <= 7

    second = client.chat.completions.create(
        model=MODEL_NAME,
        messages=[
            *HELLO,
            {"role": "assistant", "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "clear"}'},
        ],
        tools=[CHAT_TOOL],
    )
    assert second.choices[0].finish_reason in ("stop", "length")
    assert second.choices[0].message.content and not second.choices[0].message.tool_calls


def test_streamed_chat_carries_reasoning_then_the_call_in_deltas(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL_NAME,
            messages=HELLO,
            tools=[CHAT_TOOL],
            tool_choice="required",
            reasoning_effort="medium",
            stream=True,
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = "".join(getattr(d, "reasoning", None) or "" for d in deltas)
    calls = [t for d in deltas for t in d.tool_calls or []]
    assert reasoning.strip()
    assert calls[0].id and calls[0].function and calls[0].function.name == "get_weather"
    arguments = "".join(t.function.arguments or "" for t in calls if t.function)
    assert set(json.loads(arguments)) == {"site", "unit", "days"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_a_response_comes_back_with_reasoning_text_and_usage(client: openai.OpenAI) -> None:
    response = client.responses.create(model=MODEL_NAME, input="Say hello to the fleet.")

    kinds = [item.type for item in response.output]
    assert response.status == "completed" and kinds == ["reasoning", "message"]
    assert response.output_text.strip()
    usage = response.usage
    assert usage is not None and usage.output_tokens_details.reasoning_tokens > 0
    assert usage.output_tokens == len(response.output_text.split()) + (
        usage.output_tokens_details.reasoning_tokens
    )


def test_a_streamed_response_has_typed_events_and_ends_with_completed(
    client: openai.OpenAI,
) -> None:
    events = list(
        client.responses.create(
            model=MODEL_NAME, input="Stream it.", reasoning={"effort": "low"}, stream=True
        )
    )

    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.reasoning_text.delta" in kinds and "response.output_text.delta" in kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response  # type: ignore[union-attr]
    assert text == final.output_text
    assert final.usage is not None and final.usage.output_tokens > 0


def test_responses_reasoning_grows_with_effort(client: openai.OpenAI) -> None:
    counts = [
        client.responses.create(
            model=MODEL_NAME, input="Think.", reasoning={"effort": effort}, extra_body={"seed": 3}
        ).usage.output_tokens_details.reasoning_tokens  # type: ignore[union-attr]
        for effort in ("low", "medium", "high")
    ]
    assert counts[0] < counts[1] < counts[2]


def test_responses_tool_round_trip_continues_the_stored_conversation(
    client: openai.OpenAI,
) -> None:
    first = client.responses.create(model=MODEL_NAME, input=HELLO, tools=[RESPONSES_TOOL])
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather"
    assert set(json.loads(call.arguments)) == {"site", "unit", "days"}

    second = client.responses.create(
        model=MODEL_NAME,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "clear"}],
        tools=[RESPONSES_TOOL],
    )
    assert second.previous_response_id == first.id
    assert second.output_text and not [i for i in second.output if i.type == "function_call"]
    assert second.usage is not None and first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens


def test_stored_responses_are_retrieved_and_background_ones_cancelled(
    client: openai.OpenAI,
) -> None:
    done = client.responses.create(model=MODEL_NAME, input="Keep me.", max_output_tokens=16)
    assert client.responses.retrieve(done.id).output_text == done.output_text
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(done.id)

    queued = client.responses.create(
        model=MODEL_NAME, input="Run long.", background=True, extra_body={"ignore_eos": True}
    )
    assert queued.status in ("queued", "in_progress")
    cancelled = client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled" and cancelled.usage is None
    assert client.responses.retrieve(queued.id).status == cancelled.status


def test_a_background_response_completes_and_can_be_polled(client: openai.OpenAI) -> None:
    queued = client.responses.create(
        model=MODEL_NAME, input="Later.", background=True, max_output_tokens=8
    )
    deadline = time.monotonic() + 10
    status = queued.status
    while status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.02)
        status = client.responses.retrieve(queued.id).status
    assert status in ("completed", "incomplete")


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"input": "x", "previous_response_id": "resp_unknown"}, 404),
        ({"input": "x", "model": "other"}, 404),
        ({"input": []}, 400),
        ({"input": "x", "reasoning": {"effort": "extreme"}}, 400),
        ({"input": "x", "tool_choice": {"type": "function", "name": "nope"}}, 400),
        ({"input": "x", "background": True, "store": False}, 400),
    ],
)
def test_bad_responses_requests_get_openai_errors(
    sim: ReplicaThread, body: dict[str, Any], status: int
) -> None:
    code, answer = post(f"{sim.url}/v1/responses", body)

    assert code == status
    assert answer["error"]["message"]


def test_unknown_stored_response_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_nothere")


def test_tokenize_and_detokenize_round_trip_and_agree_with_usage(
    client: openai.OpenAI, sim: ReplicaThread
) -> None:
    text = "Hello, fleet — ünïcode too."
    code, tokens = post(f"{sim.url}/tokenize", {"model": MODEL_NAME, "prompt": text})
    assert code == 200 and tokens["count"] == len(tokens["tokens"])
    assert tokens["max_model_len"] == 131_072
    assert post(f"{sim.url}/detokenize", {"tokens": tokens["tokens"]}) == (200, {"prompt": text})

    _, chat = post(f"{sim.url}/tokenize", {"messages": HELLO})
    reply = client.chat.completions.create(model=MODEL_NAME, messages=HELLO, max_tokens=2)
    assert reply.usage is not None and chat["count"] == reply.usage.prompt_tokens
    assert post(f"{sim.url}/detokenize", {"tokens": [-1]})[0] == 400
    assert post(f"{sim.url}/detokenize", {"tokens": [5]})[0] == 400


def test_models_lists_the_context_length(client: openai.OpenAI) -> None:
    (model,) = client.models.list().data
    assert model.id == MODEL_NAME and model.model_dump()["max_model_len"] == 131_072
