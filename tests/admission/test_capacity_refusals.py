"""A full fleet refuses at once: HTTP 429 with an OpenAI error body and `Retry-After` (fast lane
and aiohttp alike), gRPC RESOURCE_EXHAUSTED with `retry-after` metadata; a client that goes away
gives its slot back at once, and its upstream request is cancelled (the replica counts an abort).

The one replica's capacity prior is 1 token/s: room for exactly one request at a time."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from replica_server import ReplicaThread, replica
from router_harness import MODEL, RouterServerThread, metric_value, wait_until

from orchestrator._proto.orchestrator.router.v1 import router_pb2 as pb
from orchestrator._proto.orchestrator.router.v1 import router_pb2_grpc as pb_grpc
from orchestrator.core.generations import Generation
from orchestrator.frontends.grpc.server import GrpcServer, start_grpc_server
from orchestrator.router_service import RouterService, RouterSettings, profile_named
from orchestrator.sim.replica import ReplicaSettings
from orchestrator.table.source import TableHolder
from orchestrator.table.static_file import parse_replicas

LONG = {"model": MODEL, "prompt": "Tell me everything.", "max_tokens": 5000, "ignore_eos": True,
        "stream": True}  # fmt: skip
SHORT = {"model": MODEL, "prompt": "Hi.", "max_tokens": 2}
REFUSED_WITHIN_S = 2.0  # generous: the refusal is immediate, this only rules out queueing


@pytest.fixture(scope="module")
def slow_replica() -> Iterator[ReplicaThread]:
    """Real-time steps: a 5,000-token answer takes far longer than a test waits."""
    with replica(ReplicaSettings(Generation.MI300X, time_scale=1.0, seed=5)) as server:
        yield server


class Router:
    """A router whose fleet has room for one request, serving HTTP and gRPC on one loop."""

    def __init__(self, replica_url: str) -> None:
        document = (
            "apiVersion: orchestrator/v1alpha1\nkind: Replicas\n"
            f"model: {MODEL}\nreplicas:\n"
            f'  - {{id: r-0, url: "{replica_url}", pool: p, site: lab, generation: MI300X,'
            " engine: sim, capacityTokensPerS: 1}\n"
        )
        self.service = RouterService(
            TableHolder(parse_replicas(document)), profile_named("capacity"),
            settings=RouterSettings(),
        )  # fmt: skip
        self.http = RouterServerThread(self.service).start()
        self.grpc: GrpcServer = asyncio.run_coroutine_threadsafe(
            start_grpc_server(self.service, "127.0.0.1", 0), self.http._loop
        ).result(30)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.grpc.stop(grace_s=0.5), self.http._loop).result(30)
        self.http.stop()

    def active(self) -> int:
        result = asyncio.run_coroutine_threadsafe(_active(self.service), self.http._loop)
        return result.result(10)


async def _active(service: RouterService) -> int:
    return service.admission.active()


@pytest.fixture(scope="module")
def router(slow_replica: ReplicaThread) -> Iterator[Router]:
    running = Router(slow_replica.url)
    try:
        yield running
    finally:
        running.stop()


def open_stream(url: str) -> socket.socket:
    """Start a long stream and read its head; the socket stays open until the test closes it."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    body = json.dumps(LONG).encode()
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    return sock


def post(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], dict]:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("POST", "/v1/completions", json.dumps(SHORT),
                       {"Content-Type": "application/json", **(headers or {})})  # fmt: skip
    response = connection.getresponse()
    body = json.loads(response.read())
    connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, body


def aborted(server: ReplicaThread) -> float:
    return metric_value(server.url, "vllm:request_success_total", finished_reason="abort")


def test_a_full_fleet_answers_429_at_once_on_both_http_paths_and_grpc(
    router: Router, slow_replica: ReplicaThread
) -> None:
    holder = open_stream(router.http.url)
    try:
        assert wait_until(lambda: router.active() == 1, 5)
        for headers in ({}, {"Transfer-Encoding": "chunked"}):  # fast lane, then aiohttp
            started = time.monotonic()
            if headers:
                status, answer_headers, body = _chunked_post(router.http.url)
            else:
                status, answer_headers, body = post(router.http.url)
            assert time.monotonic() - started < REFUSED_WITHIN_S
            assert status == 429, body
            assert int(answer_headers["retry-after"]) >= 1
            assert body["error"]["type"] == "RateLimitError" and body["error"]["code"] == 429
        channel = grpc.insecure_channel(f"127.0.0.1:{router.grpc.port}")
        stub = pb_grpc.RouterServiceStub(channel)
        request = pb.GenerateRequest(model=MODEL, prompt="Hi.", max_tokens=2)
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as error:
            list(stub.Generate(request, timeout=30))
        assert time.monotonic() - started < REFUSED_WITHIN_S
        assert error.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        trailers = dict(error.value.trailing_metadata() or ())
        assert int(trailers["retry-after"]) >= 1
        channel.close()
        refusals = metric_value(router.http.url, "orchestrator_router_admission_total",
                                outcome="refused_wait")  # fmt: skip
        assert refusals >= 3
    finally:
        before = aborted(slow_replica)
        holder.close()
    # The client went away: its slot comes back and the replica aborts its request at once.
    assert wait_until(lambda: router.active() == 0, 5)
    assert wait_until(lambda: aborted(slow_replica) >= before + 1, 5)
    assert post(router.http.url)[0] == 200


def _chunked_post(url: str) -> tuple[int, dict[str, str], dict]:
    """A chunked body: the fast lane hands such a request to aiohttp."""
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps(SHORT).encode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if headers.get("transfer-encoding") == "chunked":
        size, _, rest = payload.partition(b"\r\n")
        payload = rest[: int(size, 16)]
    return status, headers, json.loads(payload)


def test_queued_requests_wait_their_turn_in_priority_order(router: Router) -> None:
    """Once a request has finished (so waits can be predicted), requests that find no room
    queue briefly instead of being refused, and the interactive one goes first."""
    assert post(router.http.url)[0] == 200  # a finished request: hold times are known now
    holder = open_stream(router.http.url)
    results: dict[str, int] = {}
    order: list[str] = []

    def send(priority: str) -> None:
        results[priority] = post(router.http.url, {"X-Priority": priority})[0]
        order.append(priority)

    try:
        assert wait_until(lambda: router.active() == 1, 5)
        threads = [threading.Thread(target=send, args=(p,)) for p in ("batch", "interactive")]
        for thread in threads:
            thread.start()
            time.sleep(0.2)
    finally:
        time.sleep(0.2)
        holder.close()
    for thread in threads:
        thread.join(timeout=30)
    assert results["interactive"] == 200
    assert results["batch"] in (200, 429)  # 429 only if the box was too slow for its timeout
    if results["batch"] == 200:
        assert order[0] == "interactive"  # queued after batch, served before it
