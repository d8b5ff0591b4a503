"""GPT-OSS's own API through the router with the official `openai` client: the Responses API
(whole and streamed), reasoning by effort, tool round trips that stay on the replica holding the
conversation, stored responses routed to their holder, and the tokenizer and model routes."""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest
from replica_server import ReplicaThread, replica
from router_harness import (
    MODEL,
    ReplicaEntry,
    RouterThread,
    metric_value,
    running_router,
    wait_until,
)

from orchestrator.core.generations import Generation
from orchestrator.frontends.http.app import REPLICA_HEADER
from orchestrator.frontends.http.auth import ApiKeys
from orchestrator.frontends.http.settings import HttpSettings
from orchestrator.sim.replica import ReplicaSettings

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather at a site.",
    "parameters": {
        "type": "object",
        "properties": {"site": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["site", "days"],
    },
}
ASK = [{"role": "user", "content": "What is the weather at the Seoul site?"}]
SECRET = "sk-responses-test-0123456789"


def entries(pair: tuple[ReplicaThread, ReplicaThread]) -> list[ReplicaEntry]:
    fast, slow = pair
    return [
        ReplicaEntry("mi355x-0", fast.url, "MI355X"),
        ReplicaEntry("mi300x-0", slow.url, "MI300X"),
    ]


def client_of(router: RouterThread, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.url}/v1", api_key=key, max_retries=0)


@pytest.fixture
def client(pair_router: RouterThread) -> openai.OpenAI:
    return client_of(pair_router)


def send(url: str, body: bytes | None, method: str = "POST") -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_response_comes_back_whole_with_reasoning_and_usage(client: openai.OpenAI) -> None:
    raw = client.responses.with_raw_response.create(model=MODEL, input="Say hello.")
    response = raw.parse()

    assert raw.headers[REPLICA_HEADER] in ("mi355x-0", "mi300x-0")
    assert response.status == "completed" and response.output_text.strip()
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert response.usage is not None and response.usage.output_tokens_details.reasoning_tokens > 0


def test_a_streamed_response_is_relayed_event_by_event_and_assembles(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model=MODEL, input="Stream.", stream=True))

    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.reasoning_text.delta" in kinds
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text and text == events[-1].response.output_text  # type: ignore[union-attr]


def test_a_streamed_response_s_ttft_includes_prefill_not_just_the_created_event() -> None:
    # `response.created` goes out before prefill; TTFT is the first output delta, after it.
    ttft = "orchestrator_router_time_to_first_token_seconds_sum"
    with (
        replica(ReplicaSettings(Generation.MI300X, time_scale=1.0, seed=3)) as slow,
        running_router([ReplicaEntry("mi300x-0", slow.url, "MI300X")]) as router,
    ):
        stream = client_of(router).responses.create(
            model=MODEL, input="word " * 20_000, max_output_tokens=4, stream=True
        )
        arrivals: dict[bool, float] = {}
        for event in stream:
            arrivals.setdefault(event.type.endswith(".delta"), time.monotonic())
        assert wait_until(lambda: metric_value(router.url, ttft) > 0, 5)
        recorded_s = metric_value(router.url, ttft)
    prefill_s = arrivals[True] - arrivals[False]  # from `response.created` to the first delta
    assert prefill_s > 0.1  # long enough to tell the two apart
    assert recorded_s > 0.5 * prefill_s


def test_more_effort_means_more_reasoning_tokens(client: openai.OpenAI) -> None:
    counts = [
        client.responses.create(
            model=MODEL, input="Think.", reasoning={"effort": effort}, extra_body={"seed": 9}
        ).usage.output_tokens_details.reasoning_tokens  # type: ignore[union-attr]
        for effort in ("low", "medium", "high")
    ]
    assert counts[0] < counts[1] < counts[2]


def test_a_tool_round_trip_stays_on_the_replica_that_holds_the_conversation(
    client: openai.OpenAI,
) -> None:
    for _ in range(4):  # whichever replica the first step lands on, the second follows it
        raw = client.responses.with_raw_response.create(model=MODEL, input=ASK, tools=[WEATHER])
        first = raw.parse()
        (call,) = [item for item in first.output if item.type == "function_call"]
        assert set(json.loads(call.arguments)) == {"site", "days"}

        raw_second = client.responses.with_raw_response.create(
            model=MODEL,
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
            tools=[WEATHER],
        )
        second = raw_second.parse()
        assert raw_second.headers[REPLICA_HEADER] == raw.headers[REPLICA_HEADER]
        assert second.previous_response_id == first.id and second.output_text


def test_stored_responses_are_retrieved_and_cancelled_on_their_holder(
    client: openai.OpenAI, pair_router: RouterThread
) -> None:
    made = client.responses.with_raw_response.create(
        model=MODEL, input="Keep.", max_output_tokens=9
    )
    kept = made.parse()
    for _ in range(3):
        again = client.responses.with_raw_response.retrieve(kept.id)
        assert again.headers[REPLICA_HEADER] == made.headers[REPLICA_HEADER]
        assert again.parse().output_text == kept.output_text

    running = client.responses.create(
        model=MODEL, input="Go on.", background=True, extra_body={"ignore_eos": True}
    )
    cancelled = client.responses.cancel(running.id)
    assert cancelled.status == "cancelled"
    assert client.responses.retrieve(running.id).status == "cancelled"
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(kept.id)  # not a background response: the replica says no


def test_another_router_finds_a_response_it_did_not_relay(
    instant_pair: tuple[ReplicaThread, ReplicaThread], client: openai.OpenAI
) -> None:
    made = client.responses.create(model=MODEL, input="Shared.", max_output_tokens=5)
    with running_router(entries(instant_pair)) as other:
        found = client_of(other).responses.retrieve(made.id)
        assert found.output_text == made.output_text
        with pytest.raises(openai.NotFoundError):
            client_of(other).responses.retrieve("resp_" + "0" * 32)


def test_a_response_whose_replica_left_is_a_clean_404(
    instant_pair: tuple[ReplicaThread, ReplicaThread],
) -> None:
    with running_router(entries(instant_pair)) as router:
        client = client_of(router)
        raw = client.responses.with_raw_response.create(
            model=MODEL, input="Gone.", max_output_tokens=3
        )
        made, holder = raw.parse(), raw.headers[REPLICA_HEADER]
        table = router.service.table.snapshot()
        left = tuple(r for r in table.replicas if r.replica_id != holder)
        router.service.table.replace(
            dataclasses.replace(table, version=table.version + 1, replicas=left)
        )

        with pytest.raises(openai.NotFoundError, match="no longer serving"):
            client.responses.retrieve(made.id)
        with pytest.raises(openai.NotFoundError, match="no longer serving"):
            client.responses.create(model=MODEL, input="More.", previous_response_id=made.id)


def test_chat_completions_carry_reasoning_and_tool_calls_through_the_router(
    client: openai.OpenAI,
) -> None:
    tool = {"type": "function", "function": {k: WEATHER[k] for k in ("name", "parameters")}}
    reply = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[tool], reasoning_effort="medium"
    )
    message = reply.choices[0].message
    (call,) = message.tool_calls or []
    assert getattr(message, "reasoning", None) and reply.choices[0].finish_reason == "tool_calls"
    assert set(json.loads(call.function.arguments)) == {"site", "days"}


def test_a_key_s_request_limit_applies_before_any_stored_response_is_looked_for(
    instant_pair: tuple[ReplicaThread, ReplicaThread], tmp_path: Path
) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text(f"{SECRET} id=lookup rps=0.01 burst=1\n")
    http = HttpSettings(api_keys=ApiKeys.from_file(keys, reload_interval_s=0.0))
    unknown = "resp_" + "0" * 32
    with running_router(entries(instant_pair), http=http) as router:
        client = client_of(router, SECRET)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(unknown)  # the key's one request
        with pytest.raises(openai.RateLimitError):
            client.responses.retrieve(unknown)
        with pytest.raises(openai.RateLimitError):
            client.responses.cancel(unknown)
        with pytest.raises(openai.RateLimitError):
            client.responses.create(model=MODEL, input="x", previous_response_id=unknown)


def test_background_is_refused_to_keys_with_an_output_token_limit(
    instant_pair: tuple[ReplicaThread, ReplicaThread], tmp_path: Path
) -> None:
    limited, free = SECRET, SECRET + "-free"
    keys = tmp_path / "keys.txt"
    keys.write_text(f"{limited} id=limited tokens_per_s=100\n{free} id=free\n")
    http = HttpSettings(api_keys=ApiKeys.from_file(keys, reload_interval_s=0.0))
    with running_router(entries(instant_pair), http=http) as router:
        with pytest.raises(openai.BadRequestError, match="output-token limit") as refused:
            client_of(router, limited).responses.create(model=MODEL, input="x", background=True)
        assert refused.value.param == "background"
        assert client_of(router, limited).responses.create(model=MODEL, input="x").output_text
        made = client_of(router, free).responses.create(model=MODEL, input="x", background=True)
        assert made.background


def test_key_budgets_and_token_metrics_count_the_usage_the_engine_reported(
    instant_pair: tuple[ReplicaThread, ReplicaThread], tmp_path: Path
) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text(f"{SECRET} id=resp\n")
    http = HttpSettings(api_keys=ApiKeys.from_file(keys, reload_interval_s=0.0))
    with running_router(entries(instant_pair), http=http) as router:
        client = client_of(router, SECRET)
        reported = 0
        for effort in ("low", "high"):
            whole = client.responses.create(
                model=MODEL, input="Count.", reasoning={"effort": effort}
            )
            reported += whole.usage.output_tokens  # type: ignore[union-attr]
            streamed = list(client.responses.create(model=MODEL, input="Count.", stream=True))
            reported += streamed[-1].response.usage.output_tokens  # type: ignore[union-attr]

        def counted() -> float:
            return router.metric("orchestrator_router_key_output_tokens_total", key_id="resp")

        deadline = time.monotonic() + 5
        while counted() != reported and time.monotonic() < deadline:
            time.sleep(0.02)
        assert counted() == reported
        assert router.metric("orchestrator_router_key_requests_total", key_id="resp",
                             outcome="admitted") == 4  # fmt: skip
        assert router.service.admission.active() == 0


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, None),
        (json.dumps({"model": MODEL}).encode(), 400, "input"),
        (
            json.dumps({"model": MODEL, "input": "x", "previous_response_id": "resp_x1"}).encode(),
            404,
            "previous_response_id",
        ),
        (
            json.dumps({"model": MODEL, "input": "x", "previous_response_id": 7}).encode(),
            400,
            "previous_response_id",
        ),
        (json.dumps({"model": "gpt-4o", "input": "x"}).encode(), 404, None),
        (json.dumps({"model": MODEL, "input": "x", "stream": "yes"}).encode(), 400, "stream"),
        (json.dumps({"model": MODEL, "input": "x", "background": 1}).encode(), 400, "background"),
        (b'{"model": "m", "input": "' + b"x" * (9 * 1024 * 1024) + b'"}', 413, None),
    ],
    ids=[
        "malformed",
        "no-input",
        "unknown-previous",
        "bad-previous",
        "wrong-model",
        "bad-stream",
        "bad-background",
        "oversized",
    ],
)
def test_bad_responses_requests_get_the_right_openai_error(
    pair_router: RouterThread, body: bytes, status: int, param: str | None
) -> None:
    code, answer = send(f"{pair_router.url}/v1/responses", body)

    assert code == status
    assert set(answer["error"]) == {"message", "type", "param", "code"}
    if param is not None:
        assert answer["error"]["param"] == param


def test_bad_stored_response_paths_get_openai_errors(pair_router: RouterThread) -> None:
    assert send(f"{pair_router.url}/v1/responses/resp_unknown", None, "GET")[0] == 404
    assert send(f"{pair_router.url}/v1/responses/bad%20id", None, "GET")[0] == 404
    assert send(f"{pair_router.url}/v1/responses/resp_unknown/cancel", b"{}")[0] == 404
    assert send(f"{pair_router.url}/v1/responses/resp_x?stream=true", None, "GET")[0] == 400


def test_tokenize_detokenize_and_models_pass_through_to_a_replica(
    pair_router: RouterThread, client: openai.OpenAI
) -> None:
    code, tokens = send(
        f"{pair_router.url}/tokenize", json.dumps({"prompt": "Hello, fleet."}).encode()
    )
    assert code == 200 and tokens["count"] == len(tokens["tokens"]) > 0
    assert tokens["max_model_len"] == 131_072
    detokenized = send(
        f"{pair_router.url}/detokenize", json.dumps({"tokens": tokens["tokens"]}).encode()
    )
    assert detokenized == (200, {"prompt": "Hello, fleet."})
    assert (
        send(f"{pair_router.url}/tokenize", json.dumps({"model": "other", "prompt": "x"}).encode())[
            0
        ]
        == 404
    )
    assert send(f"{pair_router.url}/tokenize", b"[1]")[0] == 400
    assert send(f"{pair_router.url}/detokenize", json.dumps({"tokens": [-5]}).encode())[0] == 400

    (model,) = client.models.list().data
    assert model.id == MODEL and model.model_dump()["max_model_len"] == 131_072
