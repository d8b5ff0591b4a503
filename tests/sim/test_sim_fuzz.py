"""Whatever a client sends to the completion endpoints, the replica answers below 500 with a
well-formed body, and afterwards it is healthy and idle."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replica_metrics import MODEL_NAME, value, wait_until
from replica_server import ReplicaThread, replica

from orchestrator.core.generations import Generation
from orchestrator.sim.replica import ReplicaSettings

CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"
RESPONSES = "/v1/responses"
EXAMPLES_PER_ENDPOINT = 2000
RESPONSES_EXAMPLES = 300
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES_PER_ENDPOINT,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def server() -> Iterator[ReplicaThread]:
    with replica(ReplicaSettings(Generation.MI355X, time_scale=0.0, seed=7)) as running:
        yield running


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    data: bytes


class KeepAlive:
    """One HTTP/1.1 connection reused across requests, reopened if the server closes it."""

    def __init__(self, base_url: str) -> None:
        host, port = base_url.removeprefix("http://").split(":")
        self._address = (host, int(port))
        self._connection = self._open()

    def _open(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(*self._address, timeout=30)

    def post(self, path: str, raw: bytes) -> Answer:
        headers = {"Content-Type": "application/json"}
        try:
            self._connection.request("POST", path, body=raw, headers=headers)
            response = self._connection.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            self._connection.close()
            self._connection = self._open()
            self._connection.request("POST", path, body=raw, headers=headers)
            response = self._connection.getresponse()
        return Answer(response.status, response.getheader("Content-Type", ""), response.read())

    def close(self) -> None:
        self._connection.close()


# -- what clients send ----------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
REAL_KEYS = (
    "model", "max_tokens", "max_completion_tokens", "stream", "stream_options", "stop", "seed",
    "ignore_eos", "min_tokens", "n", "temperature", "top_p", "top_k", "frequency_penalty",
    "presence_penalty", "user", "stop_token_ids", "reasoning_effort", "tools", "tool_choice",
    "logprobs", "echo", "suffix",
)  # fmt: skip

SHORT = 64  # most tokens a body may force the engine to write (see `bounded_length`)
valid_sampling = st.fixed_dictionaries(
    {"max_tokens": st.integers(min_value=1, max_value=16)},
    optional={
        "model": st.sampled_from([MODEL_NAME, None]),
        "stream": st.booleans(),
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
        "stop": st.none()
        | st.text(max_size=4)
        | st.lists(st.text(max_size=4), max_size=4)
        | st.sampled_from(["the", " the", "capacity", ["a", "e"], [""]]),
        "seed": st.integers(min_value=-(2**63), max_value=2**63),
        "ignore_eos": st.booleans(),
        "min_tokens": st.integers(min_value=0, max_value=20),
        "temperature": st.floats(min_value=0, max_value=2),
        "top_p": st.floats(min_value=0.01, max_value=1),
    },
)
odd_max_tokens = st.one_of(
    st.integers(min_value=-(2**64), max_value=0),
    st.integers(min_value=130_000, max_value=2**64),
    st.sampled_from([None, 131_000, 131_071, 131_072, 2**31, 2**63, 10**30]),
)
text_parts = st.lists(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=20)}), max_size=3
)
messages = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["system", "developer", "user", "assistant", "tool"]),
            "content": st.text(max_size=40) | text_parts | st.none(),
        }
    ),
    min_size=1,
    max_size=3,
)
prompts = (
    st.text(max_size=80)
    | st.lists(st.integers(min_value=-(2**31), max_value=2**31), min_size=1, max_size=64)
    | st.lists(st.text(max_size=40), min_size=1, max_size=1)
)


def bounded_length(body: Any) -> Any:
    """Let a body force a long generation (ignore_eos, min_tokens) only under a short limit.

    Without this, `{"prompt": "x", "ignore_eos": true}` writes the rest of the 131k context and
    one such example takes seconds. Limits beyond the context are still sent: they are refused
    before anything is generated.
    """
    if not isinstance(body, dict):
        return body
    limit, completion_limit = body.get("max_tokens"), body.get("max_completion_tokens")
    limit_is_short = type(limit) is int and limit <= SHORT
    completion_limit_is_short = type(completion_limit) is not int or completion_limit <= SHORT
    if limit_is_short and completion_limit_is_short:
        return body
    return {k: v for k, v in body.items() if k not in ("ignore_eos", "min_tokens")}


def merged(*parts: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(*parts).map(lambda dicts: {k: v for d in dicts for k, v in d.items()})


def endpoint_bodies(required: str, payload: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """Valid bodies, valid bodies with odd limits or one wrong-typed field, dicts of real keys
    holding anything, any JSON value, deep nesting, and bytes that are not JSON."""
    valid = merged(valid_sampling, st.fixed_dictionaries({required: payload}))
    odd_limit = merged(
        valid,
        st.fixed_dictionaries(
            {"max_tokens": odd_max_tokens, "stream": st.booleans()},
            optional={"model": st.sampled_from(["gpt-4o", MODEL_NAME.upper()])},
        ),
    )
    one_wrong = merged(
        valid, st.dictionaries(st.sampled_from((required, *REAL_KEYS)), json_values, min_size=1)
    )
    real_keys = st.fixed_dictionaries(
        {}, optional={key: json_values for key in ("messages", "prompt", *REAL_KEYS)}
    )
    as_json = st.one_of(
        valid, valid, valid, odd_limit, one_wrong, one_wrong, real_keys, json_values
    )
    return st.one_of(
        as_json.map(bounded_length).map(lambda body: json.dumps(body).encode()),
        st.binary(max_size=64),
        st.integers(min_value=1, max_value=5000).map(
            lambda depth: b'{"prompt": ' + b"[" * depth + b"]" * depth + b', "messages": 1}'
        ),
    )


chat_bodies = endpoint_bodies("messages", messages)
text_bodies = endpoint_bodies("prompt", prompts)


# -- what the replica must answer -----------------------------------------------------------------


def check_error(answer: Answer) -> None:
    assert answer.content_type.startswith("application/json")
    error = json.loads(answer.data)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == answer.status


def check_usage(usage: dict[str, int]) -> None:
    assert usage["prompt_tokens"] >= 1
    assert usage["completion_tokens"] >= 1
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def check_whole(answer: Answer, chat: bool) -> None:
    body = json.loads(answer.data)
    assert body["object"] == ("chat.completion" if chat else "text_completion")
    assert body["model"] == MODEL_NAME
    [choice] = body["choices"]
    assert choice["finish_reason"] in ("stop", "length", "tool_calls")
    text = choice["message"]["content"] if chat else choice["text"]
    if choice["finish_reason"] == "tool_calls":
        [call] = choice["message"]["tool_calls"]
        assert isinstance(json.loads(call["function"]["arguments"]), dict)
        text = ""
    assert isinstance(text, str)
    check_usage(body["usage"])
    assert len(text.split()) <= body["usage"]["completion_tokens"]


def check_stream(answer: Answer, chat: bool) -> None:
    assert answer.content_type.startswith("text/event-stream")
    events = answer.data.decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    payloads = [json.loads(event.removeprefix("data: ")) for event in events[:-2]]
    kind = "chat.completion.chunk" if chat else "text_completion"
    assert all(p["object"] == kind for p in payloads)
    finishes = [c["finish_reason"] for p in payloads for c in p["choices"] if c["finish_reason"]]
    assert len(finishes) == 1 and finishes[0] in ("stop", "length", "tool_calls")
    if payloads[-1]["choices"] == []:
        check_usage(payloads[-1]["usage"])


RESPONSES_KEYS = (
    "model", "input", "instructions", "max_output_tokens", "stream", "store", "background",
    "previous_response_id", "reasoning", "tools", "tool_choice", "seed", "ignore_eos",
    "min_tokens", "temperature", "top_p",
)  # fmt: skip
RESPONSES_TOOL = {"type": "function", "name": "lookup", "parameters": {"type": "object",
                  "properties": {"q": {"type": "string"}}}}  # fmt: skip
response_items = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text(max_size=30)}
    )
    | st.fixed_dictionaries(
        {
            "type": st.just("function_call_output"),
            "call_id": st.text(max_size=8),
            "output": st.text(max_size=20),
        }
    ),
    min_size=1,
    max_size=3,
)
valid_responses = st.fixed_dictionaries(
    {"input": st.text(max_size=60) | response_items},
    optional={
        "model": st.sampled_from([MODEL_NAME, None]),
        "max_output_tokens": st.integers(min_value=1, max_value=16),
        "stream": st.booleans(),
        "store": st.booleans(),
        "reasoning": st.fixed_dictionaries({"effort": st.sampled_from(["low", "medium", "high"])}),
        "tools": st.just([RESPONSES_TOOL]),
        "tool_choice": st.sampled_from(["auto", "none", "required"]),
        "seed": st.integers(min_value=0, max_value=2**63),
    },
)


def bounded_response(body: Any) -> Any:
    """As `bounded_length`: no forced long generation (nor a background one) without a short
    `max_output_tokens`."""
    if not isinstance(body, dict):
        return body
    limit = body.get("max_output_tokens")
    if type(limit) is int and limit <= SHORT:
        return body
    return {k: v for k, v in body.items() if k not in ("ignore_eos", "min_tokens", "background")}


one_wrong_response = merged(
    valid_responses, st.dictionaries(st.sampled_from(RESPONSES_KEYS), json_values, min_size=1)
)
responses_bodies = st.one_of(
    st.one_of(valid_responses, valid_responses, one_wrong_response, json_values)
    .map(bounded_response)
    .map(lambda body: json.dumps(body).encode()),
    st.binary(max_size=64),
)


def check_response(answer: Answer, raw: bytes) -> None:
    assert answer.status < 500, answer.data
    if answer.status != 200:
        check_error(answer)
        return
    if not json.loads(raw).get("stream"):
        body = json.loads(answer.data)
        assert body["object"] == "response"
        assert body["status"] in ("completed", "incomplete", "queued")
        return
    assert answer.content_type.startswith("text/event-stream")
    blocks = answer.data.decode().split("\n\n")
    assert blocks[-1] == ""
    events = []
    for block in blocks[:-1]:
        kind, data = block.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert kind == f"event: {event['type']}"
        events.append(event)
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def check_answer(answer: Answer, raw: bytes, chat: bool) -> None:
    assert answer.status < 500, answer.data
    if answer.status != 200:
        check_error(answer)
        return
    sent = json.loads(raw)
    if sent.get("stream"):
        check_stream(answer, chat)
    else:
        check_whole(answer, chat)


def health(server: ReplicaThread) -> int:
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status
    finally:
        connection.close()


def engine_is_idle(server: ReplicaThread) -> bool:
    """Nothing running, nothing waiting, no KV held."""
    return all(
        value(server.url, name) == 0
        for name in (
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
        )
    )


@pytest.mark.parametrize(
    ("path", "strategy"), [(CHAT, chat_bodies), (TEXT, text_bodies)], ids=["chat", "text"]
)
def test_every_body_gets_a_well_formed_answer_below_500_and_the_replica_ends_idle(
    server: ReplicaThread, path: str, strategy: st.SearchStrategy[bytes]
) -> None:
    client = KeepAlive(server.url)
    statuses: set[int] = set()

    @FUZZ_SETTINGS
    @given(raw=strategy)
    def answers_well(raw: bytes) -> None:
        answer = client.post(path, raw)
        statuses.add(answer.status)
        check_answer(answer, raw, chat=path == CHAT)

    try:
        answers_well()
    finally:
        client.close()

    assert {200, 400} <= statuses
    assert health(server) == 200
    assert wait_until(lambda: engine_is_idle(server), timeout_s=2.0)


def test_every_responses_body_gets_a_well_formed_answer_and_the_replica_ends_idle(
    server: ReplicaThread,
) -> None:
    client = KeepAlive(server.url)
    statuses: set[int] = set()

    @settings(FUZZ_SETTINGS, max_examples=RESPONSES_EXAMPLES)
    @given(raw=responses_bodies)
    def answers_well(raw: bytes) -> None:
        answer = client.post(RESPONSES, raw)
        statuses.add(answer.status)
        check_response(answer, raw)

    try:
        answers_well()
    finally:
        client.close()

    assert {200, 400} <= statuses
    assert health(server) == 200
    assert wait_until(lambda: engine_is_idle(server), timeout_s=2.0)
