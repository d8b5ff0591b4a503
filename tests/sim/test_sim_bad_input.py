"""Bad requests get vLLM's answers: a 4xx with an OpenAI-style error body, never a 500, and the
replica keeps serving afterwards."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from replica_metrics import MODEL_NAME
from replica_server import ReplicaThread, replica

from orchestrator.core.generations import Generation
from orchestrator.sim.replica import ReplicaSettings

MAX_MODEL_LEN = 131_072
CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"
HELLO = [{"role": "user", "content": "hi"}]


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any


@pytest.fixture(scope="module")
def server() -> Iterator[ReplicaThread]:
    with replica(ReplicaSettings(Generation.MI355X, time_scale=0.0, seed=7)) as running:
        yield running


def send(server: ReplicaThread, method: str, path: str, raw: bytes | None = None) -> Answer:
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        headers = {"Content-Type": "application/json"} if raw is not None else {}
        connection.request(method, path, body=raw, headers=headers)
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    return Answer(response.status, json.loads(data) if data else None)


def post(server: ReplicaThread, path: str, body: Any) -> Answer:
    return send(server, "POST", path, json.dumps(body).encode())


def assert_openai_error(answer: Answer, status: int, param: str | None = None) -> str:
    """The body is exactly OpenAI's error shape; returns the message for further checks."""
    assert answer.status == status, answer.body
    error = answer.body["error"]
    assert set(answer.body) == {"error"}
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == status
    assert error["type"] == {400: "BadRequestError", 404: "NotFoundError"}[status]
    assert isinstance(error["message"], str) and error["message"]
    if param is not None:
        assert error["param"] == param
        assert param in error["message"]
    return error["message"]


@dataclass(frozen=True)
class Bad:
    """One bad request and the 4xx a client should get for it."""

    name: str
    path: str
    raw: bytes
    status: int = 400
    param: str | None = None


def bad(name: str, path: str, body: Any, param: str | None = None, status: int = 400) -> Bad:
    return Bad(name, path, json.dumps(body).encode(), status, param)


BAD_REQUESTS = (
    Bad("invalid JSON", CHAT, b'{"messages": [,]}'),
    Bad("truncated JSON", TEXT, b'{"prompt": "hi", "max_tok'),
    Bad("bytes that are not UTF-8", TEXT, b"\xff\xfe\xfd"),
    Bad("an empty body", CHAT, b""),
    Bad("JSON nested deeper than the parser recurses", TEXT, b"[" * 100_000),
    Bad("an integer too long to convert", TEXT, b'{"prompt": "hi", "seed": 1' + b"0" * 5000 + b"}"),
    bad("a JSON array body", CHAT, [{"messages": HELLO}]),
    bad("a JSON string body", TEXT, "prompt"),
    bad("chat without messages", CHAT, {"model": MODEL_NAME}, "messages"),
    bad("chat with no messages", CHAT, {"messages": []}, "messages"),
    bad("completion without prompt", TEXT, {"model": MODEL_NAME}, "prompt"),
    bad("chat max_tokens 0", CHAT, {"messages": HELLO, "max_tokens": 0}, "max_tokens"),
    bad("chat max_tokens -1", CHAT, {"messages": HELLO, "max_tokens": -1}, "max_tokens"),
    bad("text max_tokens 0", TEXT, {"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    bad("text max_tokens -1", TEXT, {"prompt": "hi", "max_tokens": -1}, "max_tokens"),
    bad("max_tokens as a string", TEXT, {"prompt": "hi", "max_tokens": "10"}, "max_tokens"),
    bad("max_tokens as a float", CHAT, {"messages": HELLO, "max_tokens": 1.5}, "max_tokens"),
    bad("stream as a string", CHAT, {"messages": HELLO, "stream": "yes"}, "stream"),
    bad("messages as a string", CHAT, {"messages": "hi"}, "messages"),
    bad("messages as an object", CHAT, {"messages": {"role": "user"}}, "messages"),
    bad("a message with an unknown role", CHAT, {"messages": [{"role": "x"}]}, "messages"),
    bad("temperature above 2", TEXT, {"prompt": "hi", "temperature": 3}, "temperature"),
    bad("a prompt of mixed types", TEXT, {"prompt": [1, "a"]}, "prompt"),
    bad("n above 1", TEXT, {"prompt": "hi", "n": 2}, "n"),
    bad("an unknown model", CHAT, {"model": "gpt-5", "messages": HELLO}, "model", status=404),
    bad("an unknown text model", TEXT, {"model": "llama", "prompt": "hi"}, "model", status=404),
)


@pytest.mark.parametrize("request_", BAD_REQUESTS, ids=lambda b: b.name)
def test_a_bad_request_gets_a_4xx_openai_error_naming_the_field(
    server: ReplicaThread, request_: Bad
) -> None:
    answer = send(server, "POST", request_.path, request_.raw)

    assert_openai_error(answer, request_.status, request_.param)


def test_invalid_json_is_reported_as_such(server: ReplicaThread) -> None:
    message = assert_openai_error(send(server, "POST", CHAT, b"{not json"), 400)

    assert "JSON" in message


@pytest.mark.parametrize(
    ("path", "body"),
    [
        pytest.param(TEXT, {"prompt": [1] * MAX_MODEL_LEN}, id="prompt fills the context"),
        pytest.param(
            TEXT, {"prompt": [1] * 131_000, "max_tokens": 73}, id="prompt plus max_tokens"
        ),
        pytest.param(TEXT, {"prompt": "x" * 600_000}, id="long text prompt"),
        pytest.param(
            CHAT, {"messages": HELLO, "max_tokens": MAX_MODEL_LEN}, id="chat max_tokens alone"
        ),
        pytest.param(
            CHAT,
            {"messages": HELLO, "max_completion_tokens": 10**30},
            id="huge max_completion_tokens",
        ),
    ],
)
def test_a_request_beyond_the_131k_context_is_refused_naming_the_limit(
    server: ReplicaThread, path: str, body: dict[str, Any]
) -> None:
    message = assert_openai_error(post(server, path, body), 400)

    assert f"maximum context length is {MAX_MODEL_LEN} tokens" in message


def test_a_prompt_that_leaves_exactly_room_for_max_tokens_is_served(server: ReplicaThread) -> None:
    answer = post(
        server, TEXT, {"prompt": [1] * (MAX_MODEL_LEN - 2), "max_tokens": 2, "ignore_eos": True}
    )

    assert answer.status == 200
    assert answer.body["usage"] == {
        "prompt_tokens": MAX_MODEL_LEN - 2,
        "completion_tokens": 2,
        "total_tokens": MAX_MODEL_LEN,
    }


def test_an_unknown_route_is_a_404_json_error(server: ReplicaThread) -> None:
    assert_openai_error(send(server, "GET", "/v1/engines"), 404)
    assert_openai_error(send(server, "POST", "/v2/chat/completions", b"{}"), 404)


def test_the_replica_stays_healthy_and_serves_after_every_kind_of_bad_request(
    server: ReplicaThread,
) -> None:
    for request_ in BAD_REQUESTS:
        send(server, "POST", request_.path, request_.raw)

    assert send(server, "GET", "/health").status == 200
    served = post(server, CHAT, {"messages": HELLO, "max_tokens": 3, "ignore_eos": True})
    assert served.status == 200
    assert served.body["usage"]["completion_tokens"] == 3


@pytest.fixture
def client(server: ReplicaThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def test_the_openai_client_raises_bad_request_for_an_invalid_max_tokens(
    client: openai.OpenAI,
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=MODEL_NAME, messages=HELLO, max_tokens=0)

    assert raised.value.status_code == 400
    assert raised.value.param == "max_tokens"


def test_the_openai_client_raises_bad_request_naming_the_context_limit(
    client: openai.OpenAI,
) -> None:
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.completions.create(model=MODEL_NAME, prompt=[1] * MAX_MODEL_LEN, max_tokens=1)


def test_the_openai_client_raises_not_found_for_an_unknown_model(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(model="gpt-4o", messages=HELLO)

    assert raised.value.status_code == 404
    assert raised.value.param == "model"
    assert "gpt-4o" in raised.value.message
