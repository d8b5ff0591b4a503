"""Whatever a client sends to the completion endpoints, the replica answers below 500 with a
well-formed body, and afterwards it is healthy and idle."""

from __future__ import annotations

import http.client
import json
import math
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
EXAMPLES_PER_ENDPOINT = 2000
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES_PER_ENDPOINT,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
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
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
REAL_KEYS = (
    "model", "max_tokens", "max_completion_tokens", "stream", "stream_options", "stop", "seed",
    "ignore_eos", "min_tokens", "n", "temperature", "top_p", "top_k", "frequency_penalty",
    "presence_penalty", "user", "stop_token_ids", "reasoning_effort", "tools", "tool_choice",
    "logprobs", "echo", "suffix",
)  # fmt: skip

small_max_tokens = st.integers(min_value=1, max_value=16)
any_max_tokens = (
    small_max_tokens
    | st.integers(min_value=-(2**64), max_value=0)
    | st.integers(min_value=131_000, max_value=2**64)
    | st.sampled_from([131_071, 131_072, 2**31, 2**63])
)
stops = (
    st.none()
    | st.text(max_size=4)
    | st.lists(st.text(max_size=4), max_size=4)
    | st.sampled_from(["the", " the", "capacity", ["a", "e"], [""]])
)
sampling = st.fixed_dictionaries(
    {"max_tokens": any_max_tokens},
    optional={
        "model": st.sampled_from([MODEL_NAME, None, "gpt-4o"]),
        "stream": st.booleans(),
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
        "stop": stops,
        "seed": st.integers(min_value=-(2**63), max_value=2**63),
        "ignore_eos": st.booleans(),
        "min_tokens": st.integers(min_value=0, max_value=20),
        "temperature": st.floats(min_value=-1, max_value=3),
        "top_p": st.floats(min_value=0, max_value=1.5),
        "n": st.integers(min_value=0, max_value=2),
    },
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


def valid_shaped(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(sampling, st.fixed_dictionaries(fields)).map(lambda p: {**p[0], **p[1]})


def with_real_keys(required: str) -> st.SearchStrategy[dict[str, Any]]:
    """A dict with the endpoint's real keys, each holding any JSON value."""
    return st.fixed_dictionaries(
        {}, optional={key: json_values for key in (required, "messages", "prompt", *REAL_KEYS)}
    )


def nested(depth: int) -> bytes:
    return b'{"prompt": ' + b"[" * depth + b"]" * depth + b', "messages": 1}'


def bodies(required: str, valid: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[bytes]:
    as_json = st.one_of(valid, valid, with_real_keys(required), json_values).map(
        lambda body: json.dumps(body).encode()
    )
    return st.one_of(
        as_json,
        as_json,
        as_json,
        st.binary(max_size=64),
        st.integers(min_value=1, max_value=5000).map(nested),
    )


chat_bodies = bodies("messages", valid_shaped(messages=messages))
text_bodies = bodies("prompt", valid_shaped(prompt=prompts))


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
    assert choice["finish_reason"] in ("stop", "length")
    text = choice["message"]["content"] if chat else choice["text"]
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
    assert len(finishes) == 1 and finishes[0] in ("stop", "length")
    if payloads[-1]["choices"] == []:
        check_usage(payloads[-1]["usage"])


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


def assert_healthy_and_idle(server: ReplicaThread, client: KeepAlive) -> None:
    client.close()
    assert KeepAlive(server.url).post("/health", b"").status in (200, 400)  # POST is not routed

    def idle() -> bool:
        return all(
            value(server.url, name) == 0
            for name in (
                "vllm:num_requests_running",
                "vllm:num_requests_waiting",
                "vllm:kv_cache_usage_perc",
            )
        )

    assert wait_until(idle, timeout_s=2.0)


def health(server: ReplicaThread) -> int:
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status
    finally:
        connection.close()


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


def engine_is_idle(server: ReplicaThread) -> bool:
    """Nothing running, nothing waiting, no KV held."""
    return all(
        math.isclose(value(server.url, name), 0.0)
        for name in (
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
        )
    )
