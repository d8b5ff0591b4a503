"""Whatever is wrong with a request, the client gets the right 4xx as an OpenAI-style JSON error,
and the router never forwards it or shows a traceback."""

from __future__ import annotations

import gc
import http.client
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from router_harness import (
    MODEL,
    ReplicaEntry,
    RouterThread,
    echo_replica,
    running_router,
    wait_until,
)

from orchestrator.frontends.http.auth import ApiKeys
from orchestrator.frontends.http.messages import Request
from orchestrator.frontends.http.settings import HttpSettings

LIMIT = 64 * 1024
KEY = "sk-router-test-0123456789"
CHAT = "/v1/chat/completions"
TEXT = "/v1/completions"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RouterThread, list]]:
    """A router with a 64 KiB body limit and API keys, over a replica that records bodies."""
    keys_file: Path = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys_file.write_text(f"# router keys\n\n{KEY}\nsk-another-key\n")
    http = HttpSettings(max_body_bytes=LIMIT, api_keys=ApiKeys.from_file(keys_file))
    with (
        echo_replica() as (echo, server),
        running_router(
            [ReplicaEntry("echo-0", server.url, engine="external")], http=http
        ) as router,
    ):
        yield router, echo.received


def request(
    router: RouterThread,
    method: str,
    path: str,
    body: bytes | None = None,
    key: str | None = KEY,
    **headers: str,
) -> tuple[int, dict]:
    host, port = router.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    sent = {"Content-Type": "application/json", **headers}
    if key is not None:
        sent["Authorization"] = f"Bearer {key}"
    try:
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        data = response.read()
        assert response.getheader("Content-Type", "").startswith("application/json"), data
        return response.status, json.loads(data)
    finally:
        connection.close()


def assert_openai_error(status: int, answer: dict, expected: int) -> dict:
    assert status == expected, answer
    error = answer["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == expected
    assert "Traceback" not in error["message"]
    return error


def test_a_valid_request_with_a_key_is_forwarded(guarded: tuple[RouterThread, list]) -> None:
    router, received = guarded
    before = len(received)
    body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 2}).encode()

    status, answer = request(router, "POST", TEXT, body)

    assert status == 200 and answer["usage"]["completion_tokens"] == 2
    assert len(received) == before + 1


@pytest.mark.parametrize(
    ("key", "header"),
    [(None, None), ("sk-wrong", None), (KEY + "x", None), ("", None), (None, f"Basic {KEY}")],
    ids=["missing", "wrong", "longer", "empty", "not-bearer"],
)
def test_a_missing_or_wrong_key_gets_401_everywhere_it_matters(
    guarded: tuple[RouterThread, list], key: str | None, header: str | None
) -> None:
    router, received = guarded
    before = len(received)
    extra = {"Authorization": header} if header else {}
    body = json.dumps({"model": MODEL, "prompt": "hi"}).encode()

    for method, path, payload in (
        ("POST", TEXT, body),
        ("POST", CHAT, body),
        ("GET", "/v1/models", None),
    ):
        status, answer = request(router, method, path, payload, key=key, **extra)
        error = assert_openai_error(status, answer, 401)
        assert KEY not in error["message"]
    assert len(received) == before


def test_the_official_client_raises_authentication_error_for_a_wrong_key(
    guarded: tuple[RouterThread, list],
) -> None:
    router, _ = guarded
    client = openai.OpenAI(base_url=f"{router.url}/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.completions.create(model=MODEL, prompt="hi")


def test_health_and_ready_need_no_key_and_metrics_are_on_their_own_port(
    guarded: tuple[RouterThread, list],
) -> None:
    router, _ = guarded
    for path in ("/health", "/ready"):
        status, _ = request(router, "GET", path, key=None)
        assert status == 200
    status, _ = request(router, "GET", "/metrics", key=None)
    assert status == 404  # key ids, per-key usage and replica ids are not for API clients
    with urllib.request.urlopen(f"{router.metrics_url}/metrics", timeout=5) as page:
        assert b"orchestrator_router_requests_total" in page.read()


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (CHAT, b"{not json", None),
        (CHAT, b"\xff\xfe\x00garbage", None),
        (TEXT, b"[" * 20_000 + b"]" * 20_000, None),
        (TEXT, b'["a list", "not an object"]', "body"),
        (TEXT, b"", None),
        (CHAT, json.dumps({"model": 42, "messages": [{"role": "user", "content": "x"}]}), "model"),
        (CHAT, json.dumps({"model": MODEL, "messages": "hello"}), "messages"),
        (CHAT, json.dumps({"model": MODEL, "messages": []}), "messages"),
        (CHAT, json.dumps({"model": MODEL}), "messages"),
        (TEXT, json.dumps({"model": MODEL, "prompt": 7}), "prompt"),
        (TEXT, json.dumps({"model": MODEL, "prompt": "x", "max_tokens": "10"}), "max_tokens"),
        (TEXT, json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 1.5}), "max_tokens"),
        (TEXT, json.dumps({"model": MODEL, "prompt": "x", "max_tokens": True}), "max_tokens"),
        (
            CHAT,
            json.dumps(
                {
                    "model": MODEL,
                    "messages": [{"role": "user", "content": "x"}],
                    "max_completion_tokens": [],
                }
            ),
            "max_completion_tokens",
        ),
        (TEXT, json.dumps({"model": MODEL, "prompt": "x", "stream": "yes"}), "stream"),
        (TEXT, json.dumps({"model": MODEL, "prompt": "x", "priority": "urgent"}), "priority"),
        (TEXT, json.dumps({"model": MODEL, "prompt": "x", "priority": [1]}), "priority"),
    ],
    ids=[
        "not-json", "not-utf8", "deep-nesting", "not-an-object", "empty", "model-int",
        "messages-str", "messages-empty", "messages-missing", "prompt-int", "max-tokens-str",
        "max-tokens-float", "max-tokens-bool", "max-completion-tokens-list", "stream-str",
        "priority-unknown", "priority-list",
    ],
)  # fmt: skip
def test_malformed_bodies_and_wrong_routing_field_types_get_400_naming_the_field(
    guarded: tuple[RouterThread, list], path: str, body: bytes | str, param: str | None
) -> None:
    router, received = guarded
    before = len(received)
    raw = body.encode() if isinstance(body, str) else body

    error = assert_openai_error(*request(router, "POST", path, raw), 400)

    assert param is None or error["param"] == param
    assert len(received) == before


def test_an_unknown_priority_header_gets_400(guarded: tuple[RouterThread, list]) -> None:
    router, _ = guarded
    body = json.dumps({"model": MODEL, "prompt": "x"}).encode()

    error = assert_openai_error(*request(router, "POST", TEXT, body, **{"x-priority": "now"}), 400)

    assert error["param"] == "x-priority"


def test_an_unknown_model_gets_404_naming_it(guarded: tuple[RouterThread, list]) -> None:
    router, received = guarded
    before = len(received)
    body = json.dumps({"model": "gpt-4o", "prompt": "x"}).encode()

    error = assert_openai_error(*request(router, "POST", TEXT, body), 404)

    assert "gpt-4o" in error["message"] and error["param"] == "model"
    assert len(received) == before


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_body_over_the_limit_gets_413(guarded: tuple[RouterThread, list], declared: bool) -> None:
    router, received = guarded
    before = len(received)
    prompt = "x" * (LIMIT + 1)
    raw = json.dumps({"model": MODEL, "prompt": prompt}).encode()
    host, port = router.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
    try:
        if declared:
            connection.request("POST", TEXT, body=raw, headers=headers)
        else:
            connection.request("POST", TEXT, body=iter([raw]), headers=headers, encode_chunked=True)
        response = connection.getresponse()
        status, answer = response.status, json.loads(response.read())
    finally:
        connection.close()

    assert_openai_error(status, answer, 413)
    assert len(received) == before


def test_unknown_routes_and_wrong_methods_answer_json(guarded: tuple[RouterThread, list]) -> None:
    router, _ = guarded
    assert_openai_error(*request(router, "GET", "/v1/nothing-here"), 404)
    assert_openai_error(*request(router, "GET", CHAT), 405)


def test_ready_turns_503_once_health_checks_take_the_only_replica_out() -> None:
    dead = "http://127.0.0.1:9"  # the discard port: nothing listens there
    with running_router([ReplicaEntry("dead-0", dead, engine="external")]) as router:
        assert request(router, "GET", "/ready", key=None)[0] == 200  # not yet known to be dead
        assert wait_until(lambda: request(router, "GET", "/ready", key=None)[0] == 503, 6.0)
        body = json.dumps({"model": MODEL, "prompt": "x"}).encode()
        error = assert_openai_error(*request(router, "POST", TEXT, body, key=None), 503)
        health = request(router, "GET", "/health", key=None)[0]

    assert error["type"] == "ServiceUnavailableError"
    assert health == 200


def test_a_refused_request_is_freed_by_reference_count_not_left_for_the_cyclic_collector(
    guarded: tuple[RouterThread, list],
) -> None:
    """The router worker runs a lazy young collection (few collections, since the request path
    makes no cycles): an error answer that tied the exception to the frames holding the parsed
    body would keep every refused request's body alive until a collection, in a 4xx storm."""
    router, _ = guarded
    marker = "no-such-model-5f1c"
    body = json.dumps({"model": marker, "prompt": "hi", "max_tokens": 2}).encode()
    gc.collect()
    gc.disable()
    try:
        for _ in range(5):
            status, answer = request(router, "POST", TEXT, body)
            assert_openai_error(status, answer, 404)
        # the server may still be finishing the last answer's bookkeeping when the client has it
        freed = wait_until(lambda: not held_requests(marker.encode()), timeout_s=3.0)
    finally:
        gc.enable()
    assert freed, "refused requests are held by reference cycles"


def held_requests(marker: bytes) -> list[Request]:
    return [o for o in gc.get_objects() if isinstance(o, Request) and marker in o.body]
