"""A client that goes away mid-generation frees its sequence at once, and the replica counts the
request as aborted, as vLLM does."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator

import openai
import pytest
from replica_metrics import MODEL_NAME, value, wait_until
from replica_server import ReplicaThread, replica

from orchestrator.core.generations import Generation
from orchestrator.sim.replica import ReplicaSettings

LONG_GENERATION = {
    "model": MODEL_NAME,
    "messages": [{"role": "user", "content": "Tell me everything."}],
    "max_tokens": 5000,
    "ignore_eos": True,
}
FREED_WITHIN_S = 2.0


@pytest.fixture
def real_time_replica() -> Iterator[ReplicaThread]:
    """Real-time steps, so 5,000 tokens take far longer than the test waits."""
    with replica(ReplicaSettings(Generation.MI355X, time_scale=1.0, seed=7)) as server:
        yield server


def running(server: ReplicaThread) -> float:
    return value(server.url, "vllm:num_requests_running")


def aborted(server: ReplicaThread) -> float:
    return value(server.url, "vllm:request_success_total", finished_reason="abort")


def connect(server: ReplicaThread) -> http.client.HTTPConnection:
    host, port = server.url.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=10)


def assert_freed_and_counted_as_abort(server: ReplicaThread) -> None:
    assert wait_until(lambda: running(server) == 0, timeout_s=FREED_WITHIN_S)
    assert aborted(server) == 1
    assert value(server.url, "vllm:kv_cache_usage_perc") == 0
    assert value(server.url, "vllm:request_success_total", finished_reason="length") == 0


def test_closing_a_stream_mid_generation_frees_the_sequence_and_counts_an_abort(
    real_time_replica: ReplicaThread,
) -> None:
    host, port = real_time_replica.url.removeprefix("http://").split(":")
    body = json.dumps({**LONG_GENERATION, "stream": True}).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=10) as client:
        client.sendall(head + body)
        received = b""
        while b"chat.completion.chunk" not in received:
            piece = client.recv(65536)
            assert piece, f"the replica closed the stream early: {received!r}"
            received += piece
        assert received.startswith(b"HTTP/1.1 200")
        assert running(real_time_replica) == 1

    assert_freed_and_counted_as_abort(real_time_replica)


def test_breaking_out_of_an_openai_client_stream_frees_the_sequence(
    real_time_replica: ReplicaThread,
) -> None:
    client = openai.OpenAI(base_url=f"{real_time_replica.url}/v1", api_key="unused", max_retries=0)
    with client.chat.completions.create(
        model=MODEL_NAME,
        messages=LONG_GENERATION["messages"],
        max_tokens=5000,
        stream=True,
        extra_body={"ignore_eos": True},
    ) as stream:
        for seen, _chunk in enumerate(stream, start=1):
            if seen == 3:
                break
        assert running(real_time_replica) == 1
    client.close()

    assert_freed_and_counted_as_abort(real_time_replica)


def test_a_non_streaming_client_that_gives_up_frees_the_sequence(
    real_time_replica: ReplicaThread,
) -> None:
    connection = connect(real_time_replica)
    connection.request(
        "POST",
        "/v1/completions",
        body=json.dumps({"prompt": "Tell me everything.", "max_tokens": 5000, "ignore_eos": True}),
        headers={"Content-Type": "application/json"},
    )
    assert wait_until(lambda: running(real_time_replica) == 1, timeout_s=FREED_WITHIN_S)

    connection.close()

    assert_freed_and_counted_as_abort(real_time_replica)
