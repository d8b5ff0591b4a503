"""Completions arrive in the router's fast lane; any request it does not serve itself moves the
connection to aiohttp with every byte intact. Either way the client gets the same answers, in
order, on a connection kept alive as HTTP/1.1 says, and the replica gets the body unchanged. At
shutdown an answer in progress still finishes."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import BinaryIO

import pytest
from aiohttp import web
from replica_server import replica
from router_harness import (
    MODEL,
    EchoReplica,
    ReplicaEntry,
    RouterThread,
    echo_replica,
    replicas_document,
    running_router,
)

from orchestrator.core.generations import Generation
from orchestrator.frontends.http.app import build_app
from orchestrator.frontends.http.fast_lane import FastLaneSite
from orchestrator.router_service import RouterService, profile_named
from orchestrator.sim.replica import ReplicaSettings
from orchestrator.table.source import TableHolder
from orchestrator.table.static_file import parse_replicas

TEXT = "/v1/completions"
CHAT = "/v1/chat/completions"
AIOHTTP = "aiohttp"  # in the `Server` field of answers aiohttp writes; the fast lane writes none


@pytest.fixture(scope="module")
def routed() -> Iterator[tuple[RouterThread, EchoReplica]]:
    with (
        echo_replica() as (echo, server),
        running_router([ReplicaEntry("echo-0", server.url, engine="external")]) as router,
    ):
        yield router, echo


class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def by_aiohttp(self) -> bool:
        return AIOHTTP in self.headers.get("server", "")


def read_answer(stream: BinaryIO) -> Answer:
    """One HTTP/1.1 answer from `stream`, interim 1xx answers skipped, the body de-chunked."""
    while True:
        status = int(stream.readline().split()[1])
        headers: dict[str, str] = {}
        while (line := stream.readline()) != b"\r\n":
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if status >= 200:
            break
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while size := int(stream.readline().split(b";")[0], 16):
            body += stream.read(size)
            assert stream.read(2) == b"\r\n"
        assert stream.readline() == b"\r\n"
    else:
        body = stream.read(int(headers.get("content-length", "0")))
    return Answer(status, headers, body)


class Client:
    """One raw TCP connection to the router: write any bytes, read answers in order."""

    def __init__(self, router: RouterThread) -> None:
        host, port = router.url.removeprefix("http://").split(":")
        self.socket = socket.create_connection((host, int(port)), timeout=10)
        self.stream = self.socket.makefile("rb")

    def send(self, data: bytes) -> None:
        self.socket.sendall(data)

    def answer(self) -> Answer:
        return read_answer(self.stream)

    def closed_by_router(self) -> bool:
        return self.stream.read(1) == b""

    def close(self) -> None:
        self.stream.close()
        self.socket.close()


def completion(prompt: str, **fields: object) -> bytes:
    return json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": 2, **fields}).encode()


def post(body: bytes, path: str = TEXT, *extra: str) -> bytes:
    fields = "".join(f"{field}\r\n" for field in extra)
    return (
        f"POST {path} HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\n{fields}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def test_completions_are_served_in_the_fast_lane_on_one_kept_connection(
    routed: tuple[RouterThread, EchoReplica],
) -> None:
    router, echo = routed
    client = Client(router)
    try:
        answers = []
        for index in range(3):
            client.send(post(completion(f"request {index}")))
            answers.append(client.answer())
        client.send(post(completion("streamed", stream=True)))
        streamed = client.answer()
    finally:
        client.close()

    assert [a.status for a in answers] == [200, 200, 200]
    assert not any(a.by_aiohttp for a in [*answers, streamed])
    assert all(json.loads(a.body)["usage"]["completion_tokens"] == 2 for a in answers)
    assert all(a.headers["x-orchestrator-replica"] == "echo-0" for a in answers)
    assert streamed.headers["content-type"] == "text/event-stream"
    assert streamed.body.startswith(b"data: ") and streamed.body.endswith(b"data: [DONE]\n\n")
    assert echo.received[-1] == (TEXT, completion("streamed", stream=True))


def test_pipelined_requests_and_bodies_split_anywhere_are_answered_in_order(
    routed: tuple[RouterThread, EchoReplica],
) -> None:
    router, echo = routed
    wire = post(completion("first")) + post(completion("second"), CHAT) + post(completion("third"))
    client = Client(router)
    try:
        client.send(wire[:7])
        client.send(wire[7:60])
        client.send(wire[60:])
        answers = [client.answer() for _ in range(3)]
    finally:
        client.close()

    assert [a.status for a in answers] == [200, 400, 200]  # a chat needs `messages`
    assert json.loads(answers[1].body)["error"]["param"] == "messages"
    assert [body for _, body in echo.received[-2:]] == [completion("first"), completion("third")]


def test_a_request_the_fast_lane_does_not_serve_moves_the_connection_to_aiohttp_intact(
    routed: tuple[RouterThread, EchoReplica],
) -> None:
    router, echo = routed
    client = Client(router)
    try:
        client.send(post(completion("fast")))
        fast = client.answer()
        # A models listing and a completion behind it, in one write: both go to aiohttp.
        client.send(b"GET /v1/models HTTP/1.1\r\nHost: router\r\n\r\n" + post(completion("next")))
        models, after = client.answer(), client.answer()
    finally:
        client.close()

    assert fast.status == 200 and not fast.by_aiohttp
    assert models.status == 200 and models.by_aiohttp
    assert json.loads(models.body)["data"][0]["id"] == MODEL
    assert after.status == 200 and after.by_aiohttp
    assert json.loads(after.body)["usage"]["completion_tokens"] == 2
    assert echo.received[-1] == (TEXT, completion("next"))


@pytest.mark.parametrize(
    ("wire", "status"),
    [
        (post(completion("expect"), TEXT, "Expect: 100-continue"), 200),
        (
            b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n%s\r\n0\r\n\r\n" % (len(completion("chunked")), completion("chunked")),
            200,
        ),
        (post(completion("query"), TEXT + "?api-version=1"), 200),
        (post(completion("folded"), TEXT, "X-Priority: batch\r\n  continued"), 400),
        (b"POST /v1/completions HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}", 400),
        (b"GET /v1/nothing-here HTTP/1.1\r\nHost: r\r\n\r\n", 404),
        (b"BREW /v1/completions HTCPCP/1.0\r\n\r\n", 400),
    ],
    ids=["expect", "chunked", "query", "obs-fold", "two-lengths", "unknown-route", "not-http"],
)
def test_what_the_fast_lane_leaves_to_aiohttp_gets_aiohttps_answer(
    routed: tuple[RouterThread, EchoReplica], wire: bytes, status: int
) -> None:
    router, _ = routed
    client = Client(router)
    try:
        client.send(wire)
        answer = client.answer()
    finally:
        client.close()

    assert answer.status == status and answer.by_aiohttp
    if status == 200:
        assert json.loads(answer.body)["usage"]["completion_tokens"] == 2
    elif status == 404:
        assert json.loads(answer.body)["error"]["code"] == status


def test_connection_close_is_honoured_after_the_answer(
    routed: tuple[RouterThread, EchoReplica],
) -> None:
    router, _ = routed
    client = Client(router)
    try:
        client.send(post(completion("last"), TEXT, "Connection: close"))
        answer = client.answer()
        closed = client.closed_by_router()
    finally:
        client.close()

    assert answer.status == 200 and not answer.by_aiohttp
    assert answer.headers["connection"] == "close"
    assert closed


def test_an_error_answer_keeps_the_connection_for_the_next_request(
    routed: tuple[RouterThread, EchoReplica],
) -> None:
    router, _ = routed
    client = Client(router)
    try:
        client.send(post(b"{not json") + post(completion("fine")))
        bad, good = client.answer(), client.answer()
    finally:
        client.close()

    assert bad.status == 400 and bad.headers["content-type"].startswith("application/json")
    assert set(json.loads(bad.body)["error"]) == {"message", "type", "param", "code"}
    assert good.status == 200 and not good.by_aiohttp


def test_stopping_lets_an_answer_in_progress_finish_and_closes_idle_connections() -> None:
    settings = ReplicaSettings(Generation.MI355X, time_scale=1.0, seed=5)  # real-time tokens
    long_stream = completion("Keep going.", max_tokens=300, ignore_eos=True, stream=True)

    async def test(replica_url: str) -> tuple[bytes, bytes]:
        table = parse_replicas(replicas_document([ReplicaEntry("rt-0", replica_url)]))
        service = RouterService(TableHolder(table), profile_named("capacity"))
        runner = web.AppRunner(build_app(service), handler_cancellation=True, access_log=None)
        await runner.setup()
        await FastLaneSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        idle, _ = await asyncio.open_connection("127.0.0.1", port)
        busy, busy_writer = await asyncio.open_connection("127.0.0.1", port)
        busy_writer.write(post(long_stream))
        started = await busy.readuntil(b"data: ")

        stopping = asyncio.create_task(runner.cleanup())
        idle_end = await asyncio.wait_for(idle.read(), 2)
        assert not stopping.done()  # still waiting for the stream
        rest = await asyncio.wait_for(busy.read(), 20)  # everything until the router closes
        await asyncio.wait_for(stopping, 5)
        return idle_end, started + rest

    with replica(settings) as server:
        idle_end, answer = asyncio.run(test(server.url))

    assert idle_end == b""
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    assert answer.count(b'"text":') >= 300
