"""A client that goes away cancels its upstream request at once (the replica counts an abort), and
no request outlives its deadline: before the first token it fails with 504, mid-stream it ends
with a terminal error event. A client that goes away once it has read [DONE] had its answer."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator

import pytest
from replica_server import ReplicaThread, replica
from router_harness import (
    MODEL,
    ReplicaEntry,
    RouterThread,
    echo_replica,
    metric_value,
    running_router,
    wait_until,
)

from orchestrator.core.generations import Generation
from orchestrator.forwarding.breaker import BreakerState
from orchestrator.router_service import RouterSettings
from orchestrator.sim.replica import ReplicaSettings

LONG = {"model": MODEL, "prompt": "Tell me everything.", "max_tokens": 5000, "ignore_eos": True}
FREED_WITHIN_S = 2.0
DEADLINE_S = 1.5


@pytest.fixture(scope="module")
def real_time_replica() -> Iterator[ReplicaThread]:
    """Real-time steps: 5,000 tokens take several seconds, far longer than the tests wait."""
    with replica(ReplicaSettings(Generation.MI355X, time_scale=1.0, seed=3)) as server:
        yield server


@pytest.fixture(scope="module")
def router(real_time_replica: ReplicaThread) -> Iterator[RouterThread]:
    settings = RouterSettings(request_deadline_s=DEADLINE_S)
    with running_router(
        [ReplicaEntry("rt-0", real_time_replica.url, "MI355X")], settings=settings
    ) as running:
        yield running


def aborted(server: ReplicaThread) -> float:
    return metric_value(server.url, "vllm:request_success_total", finished_reason="abort")


def running(server: ReplicaThread) -> float:
    return metric_value(server.url, "vllm:num_requests_running")


def settled(router: RouterThread, server: ReplicaThread) -> bool:
    """Nothing left running anywhere, the books balanced, and the circuit untouched: a client
    going away or a deadline is not the replica's fault."""
    stats = router.service.fleet.stats("rt-0")
    assert stats is not None
    assert router.service.breakers.state("rt-0") is BreakerState.CLOSED
    return (
        running(server) == 0
        and stats.in_flight == 0
        and stats.started_total == stats.finished_total
    )


def raw_post(router: RouterThread, body: dict) -> socket.socket:
    host, port = router.url.removeprefix("http://").split(":")
    payload = json.dumps(body).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    client = socket.create_connection((host, int(port)), timeout=10)
    client.sendall(head + payload)
    return client


def test_closing_a_stream_mid_generation_aborts_the_upstream_request(
    router: RouterThread, real_time_replica: ReplicaThread
) -> None:
    before = aborted(real_time_replica)
    with raw_post(router, {**LONG, "stream": True}) as client:
        received = b""
        while received.count(b"data:") < 3:
            piece = client.recv(65536)
            assert piece, f"the router closed the stream early: {received!r}"
            received += piece
        assert running(real_time_replica) == 1

    assert wait_until(lambda: aborted(real_time_replica) == before + 1, FREED_WITHIN_S)
    assert wait_until(lambda: settled(router, real_time_replica), FREED_WITHIN_S)


def test_a_non_streaming_client_that_gives_up_aborts_the_upstream_request(
    router: RouterThread, real_time_replica: ReplicaThread
) -> None:
    before = aborted(real_time_replica)
    with raw_post(router, LONG):
        assert wait_until(lambda: running(real_time_replica) == 1, FREED_WITHIN_S)

    assert wait_until(lambda: aborted(real_time_replica) == before + 1, FREED_WITHIN_S)
    assert wait_until(lambda: settled(router, real_time_replica), FREED_WITHIN_S)


def test_a_request_without_a_token_by_its_deadline_gets_504(
    router: RouterThread, real_time_replica: ReplicaThread
) -> None:
    host, port = router.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    started = time.monotonic()
    connection.request(
        "POST",
        "/v1/completions",
        body=json.dumps(LONG),
        headers={"Content-Type": "application/json"},
    )
    response = connection.getresponse()
    answer = json.loads(response.read())
    took_s = time.monotonic() - started
    connection.close()

    assert response.status == 504
    assert answer["error"]["code"] == 504 and answer["error"]["type"] == "TimeoutError"
    assert DEADLINE_S - 0.05 <= took_s < DEADLINE_S + 0.5
    assert wait_until(lambda: settled(router, real_time_replica), FREED_WITHIN_S)


def test_a_stream_still_running_at_its_deadline_ends_with_an_error_event(
    router: RouterThread, real_time_replica: ReplicaThread
) -> None:
    before = aborted(real_time_replica)
    host, port = router.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    started = time.monotonic()
    connection.request(
        "POST",
        "/v1/completions",
        body=json.dumps({**LONG, "stream": True}),
        headers={"Content-Type": "application/json"},
    )
    response = connection.getresponse()
    events = [e for e in response.read().split(b"\n\n") if e]
    took_s = time.monotonic() - started
    connection.close()

    assert response.status == 200
    *tokens, error_event, done = events
    assert len(tokens) > 10  # tokens streamed before the deadline
    assert all(b"text_completion" in token for token in tokens)
    assert json.loads(error_event.removeprefix(b"data: "))["error"]["code"] == 504
    assert done == b"data: [DONE]"
    assert DEADLINE_S - 0.05 <= took_s < DEADLINE_S + 0.5
    assert wait_until(lambda: aborted(real_time_replica) == before + 1, FREED_WITHIN_S)
    assert wait_until(lambda: settled(router, real_time_replica), FREED_WITHIN_S)


def test_a_streamed_response_at_its_deadline_ends_with_an_error_event_in_its_framing(
    router: RouterThread, real_time_replica: ReplicaThread
) -> None:
    before = aborted(real_time_replica)
    host, port = router.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    body = {"model": MODEL, "input": "Tell me everything.", "max_output_tokens": 5000,
            "ignore_eos": True, "stream": True}  # fmt: skip
    connection.request(
        "POST", "/v1/responses", body=json.dumps(body), headers={"Content-Type": "application/json"}
    )
    response = connection.getresponse()
    blocks = [b for b in response.read().split(b"\n\n") if b]
    connection.close()

    assert response.status == 200
    events = [block.split(b"\n") for block in blocks]
    assert all(kind.startswith(b"event: ") and data.startswith(b"data: ") for kind, data in events)
    *streamed, (kind, data) = events
    error = json.loads(data.removeprefix(b"data: "))
    assert kind == b"event: error" and error["type"] == "error"
    assert error["code"] == "deadline_exceeded" and error["message"]
    last = json.loads(streamed[-1][1].removeprefix(b"data: "))
    assert error["sequence_number"] == last["sequence_number"] + 1
    assert len(streamed) > 10 and b"[DONE]" not in b"".join(blocks)
    assert wait_until(lambda: aborted(real_time_replica) == before + 1, FREED_WITHIN_S)
    assert wait_until(lambda: settled(router, real_time_replica), FREED_WITHIN_S)


def test_a_client_that_hangs_up_as_soon_as_it_reads_done_was_answered() -> None:
    """As the official client does: it stops reading at [DONE] and closes, while the replica
    has yet to end its body."""
    with echo_replica() as (echo, server):
        echo.end_after_done_s = 0.5
        with running_router([ReplicaEntry("echo-0", server.url, engine="external")]) as router:
            answered = router.metric("orchestrator_router_requests_total", code="200")
            for index in range(3):
                body = {"model": MODEL, "prompt": f"request {index}", "stream": True}
                with raw_post(router, body) as client:
                    received = b""
                    while b"data: [DONE]\n\n" not in received:
                        piece = client.recv(65536)
                        assert piece, f"the router closed the stream early: {received!r}"
                        received += piece

            assert wait_until(
                lambda: (
                    router.metric("orchestrator_router_requests_total", code="200") == answered + 3
                ),
                FREED_WITHIN_S,
            )
            left = router.metric("orchestrator_router_requests_total", code="499")
            stats = router.service.fleet.stats("echo-0")
            successes = router.metric("orchestrator_router_request_duration_seconds_count")

    assert left == 0
    assert stats is not None and stats.in_flight == 0
    assert stats.started_total == stats.finished_total == 3
    assert successes == 3  # each attempt ended as a success
