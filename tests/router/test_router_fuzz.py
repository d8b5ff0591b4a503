"""Whatever a client sends to the completion endpoints, the router answers below 500 with a
well-formed body, and afterwards it is healthy, ready, and holds nothing in flight."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replica_server import ReplicaThread
from router_harness import MODEL, ReplicaEntry, RouterThread, get_status, running_router

CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"
EXAMPLES_PER_ENDPOINT = 2000
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES_PER_ENDPOINT,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def router(instant_pair: tuple[ReplicaThread, ReplicaThread]) -> Iterator[RouterThread]:
    fast, slow = instant_pair
    entries = [ReplicaEntry("a", fast.url, "MI355X"), ReplicaEntry("b", slow.url, "MI300X")]
    with running_router(entries) as running:
        yield running


class KeepAlive:
    """One HTTP/1.1 connection reused across requests, reopened if the server closes it."""

    def __init__(self, base_url: str) -> None:
        host, port = base_url.removeprefix("http://").split(":")
        self._address = (host, int(port))
        self._connection = http.client.HTTPConnection(*self._address, timeout=30)

    def post(self, path: str, raw: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
        for attempt in range(2):
            try:
                self._connection.request("POST", path, body=raw, headers=headers)
                response = self._connection.getresponse()
                return response.status, response.getheader("Content-Type", ""), response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._connection.close()
                self._connection = http.client.HTTPConnection(*self._address, timeout=30)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._connection.close()


# -- what clients send ----------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
ROUTING_KEYS = (
    "model", "messages", "prompt", "max_tokens", "max_completion_tokens", "stream", "priority",
    "stream_options", "reasoning_effort", "tools", "ignore_eos", "min_tokens",
)  # fmt: skip
messages = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["system", "user", "assistant", "tool", "robot"]),
            "content": st.text(max_size=300)
            | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text()}))
            | st.none(),
        }
    ),
    min_size=1,
    max_size=3,
)
prompts = (
    st.text(max_size=300)
    | st.lists(st.integers(min_value=-(2**31), max_value=2**31), min_size=1, max_size=80)
    | st.lists(st.text(max_size=40), min_size=1, max_size=2)
)
valid = st.fixed_dictionaries(
    {"max_tokens": st.integers(min_value=1, max_value=8)},
    optional={
        "model": st.sampled_from([MODEL, "gpt-4o", ""]),
        "stream": st.booleans(),
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
        "priority": st.sampled_from(["interactive", "batch", "BATCH", 3, "later"]),
        "reasoning_effort": st.sampled_from(["low", "medium", "high", "extreme"]),
        "seed": st.integers(min_value=0, max_value=2**32),
    },
)
headers = st.fixed_dictionaries(
    {},
    optional={
        "x-priority": st.sampled_from(["batch", "interactive", "urgent", ""]),
        "x-client-site": st.text(
            alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=12
        ),
    },
)


def no_long_generations(body: Any) -> Any:
    """Keep any one example short: a body may not force thousands of tokens."""
    if isinstance(body, dict):
        limit = body.get("max_tokens")
        if not (type(limit) is int and 0 < limit <= 16) or "max_completion_tokens" in body:
            body = {k: v for k, v in body.items() if k not in ("ignore_eos", "min_tokens")}
    return body


def bodies(required: str, payload: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """Valid bodies, valid ones with a wrong-typed field, dicts of real keys holding anything,
    any JSON value, and bytes that are not JSON."""
    good = st.tuples(valid, st.fixed_dictionaries({required: payload})).map(
        lambda parts: {**parts[0], **parts[1]}
    )
    one_wrong = st.tuples(good, st.dictionaries(st.sampled_from(ROUTING_KEYS), json_values)).map(
        lambda parts: {**parts[0], **parts[1]}
    )
    anything = st.fixed_dictionaries({}, optional={key: json_values for key in ROUTING_KEYS})
    as_json = st.one_of(good, good, one_wrong, one_wrong, anything, json_values)
    return st.one_of(
        as_json.map(no_long_generations).map(lambda body: json.dumps(body).encode()),
        st.binary(max_size=48),
    )


# -- what the router must answer ------------------------------------------------------------------


def check(status: int, content_type: str, data: bytes) -> None:
    assert status < 500, data
    if status == 200:
        if content_type.startswith("text/event-stream"):
            assert data.endswith(b"data: [DONE]\n\n")
            assert b'"error"' not in data
        else:
            assert json.loads(data)["usage"]["completion_tokens"] >= 1
        return
    assert content_type.startswith("application/json")
    error = json.loads(data)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == status


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("path", "strategy"),
    [(CHAT, bodies("messages", messages)), (TEXT, bodies("prompt", prompts))],
    ids=["chat", "text"],
)
def test_every_body_gets_a_well_formed_answer_below_500_and_the_router_stays_healthy(
    router: RouterThread, path: str, strategy: st.SearchStrategy[bytes]
) -> None:
    client = KeepAlive(router.url)
    statuses: set[int] = set()

    @FUZZ_SETTINGS
    @given(raw=strategy, extra=headers)
    def answers_well(raw: bytes, extra: dict[str, str]) -> None:
        status, content_type, data = client.post(
            path, raw, {"Content-Type": "application/json", **extra}
        )
        statuses.add(status)
        check(status, content_type, data)

    try:
        answers_well()
    finally:
        client.close()

    assert {200, 400, 404} <= statuses
    assert get_status(f"{router.url}/health") == 200
    assert get_status(f"{router.url}/ready") == 200
    for replica_id in ("a", "b"):
        stats = router.service.fleet.stats(replica_id)
        assert stats is not None
        assert stats.in_flight == 0 and not stats.circuit_open
        assert stats.started_total == stats.finished_total


# -- the Responses API and the tokenizer routes ---------------------------------------------------

RESPONSES = "/v1/responses"
RESPONSES_EXAMPLES = 300
RESPONSES_KEYS = (
    "model", "input", "instructions", "max_output_tokens", "stream", "priority", "reasoning",
    "previous_response_id", "tools", "tool_choice", "store", "background", "ignore_eos",
)  # fmt: skip
response_inputs = st.text(max_size=300) | st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant"]), "content": st.text(max_size=80)}
    )
    | st.fixed_dictionaries(
        {
            "type": st.just("function_call_output"),
            "call_id": st.text(max_size=6),
            "output": st.text(),
        }
    ),
    min_size=1,
    max_size=3,
)
valid_responses = st.fixed_dictionaries(
    {"input": response_inputs, "max_output_tokens": st.integers(min_value=1, max_value=8)},
    optional={
        "model": st.sampled_from([MODEL, "gpt-4o"]),
        "stream": st.booleans(),
        "priority": st.sampled_from(["interactive", "batch", "later"]),
        "reasoning": st.fixed_dictionaries({"effort": st.sampled_from(["low", "high", "max"])}),
        "previous_response_id": st.sampled_from(["resp_nothere", "../etc", 5, ""]),
        "tool_choice": st.sampled_from(["auto", "none", "required"]),
        "seed": st.integers(min_value=0, max_value=2**32),
    },
)


def no_long_responses(body: Any) -> Any:
    if isinstance(body, dict):
        limit = body.get("max_output_tokens")
        if not (type(limit) is int and 0 < limit <= 16):
            drop = ("ignore_eos", "min_tokens", "background")
            body = {k: v for k, v in body.items() if k not in drop}
    return body


responses_bodies = st.one_of(
    st.one_of(
        valid_responses,
        valid_responses,
        st.tuples(
            valid_responses, st.dictionaries(st.sampled_from(RESPONSES_KEYS), json_values)
        ).map(lambda parts: {**parts[0], **parts[1]}),
        json_values,
    )
    .map(no_long_responses)
    .map(lambda body: json.dumps(body).encode()),
    st.binary(max_size=48),
)
tokenizer_bodies = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "model": st.sampled_from([MODEL, "other"]) | json_values,
            "prompt": st.text(max_size=200) | json_values,
            "messages": messages | json_values,
            "tokens": st.lists(st.integers(min_value=-5, max_value=2**40), max_size=20)
            | json_values,
        },
    ).map(lambda body: json.dumps(body).encode()),
    st.binary(max_size=48),
)


def check_response(status: int, content_type: str, data: bytes) -> None:
    assert status < 500, data
    if status != 200:
        check(status, content_type, data)
        return
    if content_type.startswith("text/event-stream"):
        assert b"data: [DONE]" not in data and b"event: error\n" not in data
        last = data.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
        assert last.startswith((b"event: response.completed\n", b"event: response.incomplete\n"))
    else:
        body = json.loads(data)
        assert body["object"] == "response"
        assert body["status"] == "queued" or body["usage"]["output_tokens"] >= 1


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("path", "strategy", "checker"),
    [
        (RESPONSES, responses_bodies, check_response),
        ("/tokenize", tokenizer_bodies, check),
        ("/detokenize", tokenizer_bodies, check),
    ],
    ids=["responses", "tokenize", "detokenize"],
)
def test_every_responses_and_tokenizer_body_gets_a_well_formed_answer(
    router: RouterThread, path: str, strategy: st.SearchStrategy[bytes], checker: Any
) -> None:
    client = KeepAlive(router.url)
    statuses: set[int] = set()

    @settings(FUZZ_SETTINGS, max_examples=RESPONSES_EXAMPLES)
    @given(raw=strategy, extra=headers)
    def answers_well(raw: bytes, extra: dict[str, str]) -> None:
        status, content_type, data = client.post(
            path, raw, {"Content-Type": "application/json", **extra}
        )
        statuses.add(status)
        if status == 200 and path != RESPONSES:
            assert json.loads(data)  # the replica's tokenizer answer, passed through
            return
        checker(status, content_type, data)

    try:
        answers_well()
    finally:
        client.close()

    assert {200, 400} <= statuses
    assert get_status(f"{router.url}/ready") == 200
    for replica_id in ("a", "b"):
        stats = router.service.fleet.stats(replica_id)
        assert stats is not None and stats.in_flight == 0 and not stats.circuit_open
