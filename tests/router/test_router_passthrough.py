"""The router forwards bodies byte for byte, hands a replica's 4xx to the client untouched, and
moves requests that meet a 5xx to another replica, until the broken one's circuit opens."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
from router_harness import MODEL, ReplicaEntry, echo_replica, running_router, wait_until

from orchestrator.forwarding.breaker import BreakerSettings, BreakerState
from orchestrator.router_service import RouterSettings

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def post(url: str, raw: bytes) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url, data=raw, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_gpt_oss_fields_reach_the_replica_exactly_as_the_client_sent_them() -> None:
    with (
        echo_replica() as (echo, server),
        running_router([ReplicaEntry("echo-0", server.url, engine="external")]) as router,
    ):
        client = openai.OpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0)
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Weather in Seoul?"}],
            max_tokens=16,
            reasoning_effort="high",
            tools=[WEATHER_TOOL],  # type: ignore[list-item]
            tool_choice="auto",
        )
        # Odd spacing, key order and unicode escapes must survive too: no re-encoding on the way.
        raw = (
            b'{ "prompt" : "caf\\u00e9",  "model":"openai/gpt-oss-120b", "max_tokens": 2,'
            b' "reasoning_effort": "low", "tools": [], "x_vendor": {"nested": [1, 2.50]}}'
        )
        status, _ = post(f"{router.url}/v1/completions", raw)

    assert status == 200
    [(chat_path, chat_body), (text_path, text_body)] = echo.received
    assert chat_path == "/v1/chat/completions"
    sent = json.loads(chat_body)
    assert sent["reasoning_effort"] == "high"
    assert sent["tools"] == [WEATHER_TOOL]
    assert sent["tool_choice"] == "auto"
    assert text_path == "/v1/completions"
    assert text_body == raw


def test_a_replicas_4xx_reaches_the_client_as_is_and_is_not_retried() -> None:
    with echo_replica() as (first, first_server), echo_replica() as (second, second_server):
        replicas = [
            ReplicaEntry("echo-0", first_server.url, engine="external"),
            ReplicaEntry("echo-1", second_server.url, engine="external"),
        ]
        with running_router(replicas) as router:
            raw = json.dumps({"model": MODEL, "prompt": "x", "echo_status": 429}).encode()
            status, body = post(f"{router.url}/v1/completions", raw)
            retries = router.metric("orchestrator_router_retries_total")

    assert status == 429
    assert json.loads(body)["error"]["message"] == "as asked"
    assert len(first.received) + len(second.received) == 1
    assert retries == 0


def test_a_replica_answering_500_costs_no_client_request_and_its_circuit_opens() -> None:
    settings = RouterSettings(breaker=BreakerSettings(failure_threshold=3, open_s=60.0))
    with (
        echo_replica(fail_status=500) as (broken, broken_server),
        echo_replica() as (healthy, healthy_server),
    ):
        replicas = [
            ReplicaEntry("broken", broken_server.url, engine="external"),
            ReplicaEntry("healthy", healthy_server.url, engine="external"),
        ]
        with running_router(replicas, profile="round-robin", settings=settings) as router:
            statuses = [
                post(
                    f"{router.url}/v1/completions",
                    json.dumps({"model": MODEL, "prompt": f"request {i}"}).encode(),
                )[0]
                for i in range(30)
            ]
            retries = router.metric("orchestrator_router_retries_total")
            failed = router.metric(
                "orchestrator_router_upstream_errors_total", replica="broken", kind="http_5xx"
            )
            skipped = router.metric(
                "orchestrator_router_upstream_errors_total", replica="broken", kind="circuit_open"
            )
            stats = router.service.fleet.stats("broken")
            assert wait_until(
                lambda: router.metric("orchestrator_router_circuit_open", replica="broken") == 1,
                timeout_s=3,
            )

    assert statuses == [200] * 30
    assert len(broken.received) == 3  # the failure threshold, then no more traffic
    assert len(healthy.received) == 30
    assert failed == 3
    assert retries == failed + skipped  # routing may pick it until it sees the open circuit
    assert stats is not None and stats.circuit_open


def test_a_stream_whose_replica_hangs_up_before_the_first_byte_completes_elsewhere() -> None:
    with (
        echo_replica(hang_up=True) as (hanging, hanging_server),
        echo_replica() as (healthy, healthy_server),
    ):
        replicas = [
            ReplicaEntry("hanging", hanging_server.url, engine="external"),
            ReplicaEntry("healthy", healthy_server.url, engine="external"),
        ]
        with running_router(replicas, profile="round-robin") as router:
            answers = [
                post(
                    f"{router.url}/v1/completions",
                    json.dumps({"model": MODEL, "prompt": f"request {i}", "stream": True}).encode(),
                )
                for i in range(10)
            ]
            disconnects = router.metric(
                "orchestrator_router_upstream_errors_total", replica="hanging", kind="disconnect"
            )

    assert all(status == 200 and body.endswith(b"data: [DONE]\n\n") for status, body in answers)
    assert all(b'"error"' not in body for _, body in answers)
    assert len(hanging.received) == disconnects == 3
    assert len(healthy.received) == 10


def test_a_replica_failing_health_checks_is_skipped_until_it_recovers() -> None:
    settings = RouterSettings(breaker=BreakerSettings(failure_threshold=2, open_s=0.5))
    with (
        echo_replica() as (flaky, flaky_server),
        echo_replica() as (steady, steady_server),
    ):
        replicas = [
            ReplicaEntry("flaky", flaky_server.url, engine="external"),
            ReplicaEntry("steady", steady_server.url, engine="external"),
        ]
        with running_router(replicas, profile="round-robin", settings=settings) as router:
            body = json.dumps({"model": MODEL, "prompt": "x"}).encode()
            breakers = router.service.breakers

            flaky.healthy = False
            assert wait_until(lambda: breakers.state("flaky") is BreakerState.OPEN, 5.0)
            served_while_down, steady_before = len(flaky.received), len(steady.received)
            down = [post(f"{router.url}/v1/completions", body)[0] for _ in range(10)]
            skipped_while_down = len(flaky.received) - served_while_down
            steady_while_down = len(steady.received) - steady_before

            flaky.healthy = True
            assert wait_until(lambda: breakers.state("flaky") is not BreakerState.OPEN, 5.0)
            up = [post(f"{router.url}/v1/completions", body)[0] for _ in range(10)]
            state_after = breakers.state("flaky")

    assert down + up == [200] * 20
    assert skipped_while_down == 0 and steady_while_down == 10
    assert state_after is BreakerState.CLOSED  # the probe succeeded
    assert len(flaky.received) - served_while_down >= 4  # round robin again, about half
