"""The router's one HTTP server framing crafted requests per RFC 9112: each gets its status, the
connection is kept or closed as the RFC says, and the router stays healthy after every one. Then
the behaviours around it: pipelining in order, every route on the same path, the head and idle
timeouts, linear handling of repeated fields, and a clean stop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator

import pytest
from http_wire import RawClient, completion, post
from replica_server import replica
from router_harness import (
    EchoReplica,
    ReplicaEntry,
    RouterThread,
    echo_replica,
    get_status,
    replicas_document,
    running_router,
)

from orchestrator.core.generations import Generation
from orchestrator.frontends.http.limits import ConnectionSettings
from orchestrator.frontends.http.server import RouterHttpServer
from orchestrator.frontends.http.settings import HttpSettings
from orchestrator.router_service import RouterService, profile_named
from orchestrator.sim.replica import ReplicaSettings
from orchestrator.table.source import TableHolder
from orchestrator.table.static_file import parse_replicas

LIMIT = 64 * 1024
HEAD_TIMEOUT_S = 1.0
GOOD = completion("fine")


@pytest.fixture(scope="module")
def routed() -> Iterator[tuple[RouterThread, EchoReplica]]:
    with (
        echo_replica() as (echo, server),
        running_router(
            [ReplicaEntry("echo-0", server.url, engine="external")],
            http=HttpSettings(max_body_bytes=LIMIT),
            connection=ConnectionSettings(
                head_timeout_s=HEAD_TIMEOUT_S, body_timeout_s=HEAD_TIMEOUT_S, idle_s=3.0
            ),
        ) as router,
    ):
        yield router, echo


def chunked(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def head(*fields: str, line: str = "POST /v1/completions HTTP/1.1") -> bytes:
    return (line + "\r\n" + "".join(f"{f}\r\n" for f in fields) + "\r\n").encode()


KEEP, CLOSE = False, True
REQUESTS = [
    ("plain", post(GOOD), 200, KEEP),
    ("chat-needs-messages", post(GOOD, "/v1/chat/completions"), 400, KEEP),
    ("query-string", post(GOOD, "/v1/completions?api-version=1"), 200, KEEP),
    ("absolute-form", head("Host: r", f"Content-Length: {len(GOOD)}",
                           line="POST http://r/v1/completions HTTP/1.1") + GOOD, 200, KEEP),
    ("http10-closes", post(GOOD, version="1.0"), 200, CLOSE),
    ("http10-keep-alive", post(GOOD, "/v1/completions", "Connection: keep-alive",
                               version="1.0"), 200, KEEP),
    ("connection-close", post(GOOD, "/v1/completions", "Connection: close"), 200, CLOSE),
    ("close-token-in-list", post(GOOD, "/v1/completions", "Connection: foo, close"), 200, CLOSE),
    ("not-close-is-no-close", post(GOOD, "/v1/completions", "Connection: notclose"), 200, KEEP),
    ("chunked-body", head("Host: r", "Transfer-Encoding: chunked") + chunked(GOOD), 200, KEEP),
    ("expect-continue", post(GOOD, "/v1/completions", "Expect: 100-continue"), 200, KEEP),
    ("expect-other", post(GOOD, "/v1/completions", "Expect: teapot"), 417, KEEP),
    ("bad-json", post(b"{nope"), 400, KEEP),
    ("latin1-field-value", post(GOOD, "/v1/completions", "X-Note: caf\xe9"), 200, KEEP),
    ("unknown-route", head("Host: r", line="GET /v1/nothing HTTP/1.1"), 404, KEEP),
    ("wrong-method", head("Host: r", line="GET /v1/completions HTTP/1.1"), 405, KEEP),
    ("no-host", head(f"Content-Length: {len(GOOD)}") + GOOD, 400, CLOSE),
    ("two-hosts", head("Host: a", "Host: b", f"Content-Length: {len(GOOD)}") + GOOD, 400, CLOSE),
    ("obs-fold", post(GOOD, "/v1/completions", "X-Priority: batch\r\n  continued"), 400, CLOSE),
    ("two-lengths", head("Host: r", "Content-Length: 1", "Content-Length: 2") + b"{}", 400, CLOSE),
    ("same-length-twice", head("Host: r", "Content-Length: 2", "Content-Length: 2") + b"{}",
     400, CLOSE),
    ("chunked-and-length", head("Host: r", "Transfer-Encoding: chunked", "Content-Length: 5")
     + chunked(b"{}"), 400, CLOSE),
    ("unknown-coding", head("Host: r", "Transfer-Encoding: gzip") + b"{}", 400, CLOSE),
    ("length-not-digits", head("Host: r", "Content-Length: 1a") + b"{}", 400, CLOSE),
    ("length-negative", head("Host: r", "Content-Length: -1") + b"{}", 400, CLOSE),
    ("bad-chunk-size", head("Host: r", "Transfer-Encoding: chunked") + b"zz\r\n{}\r\n0\r\n\r\n",
     400, CLOSE),
    ("bare-lf", b"POST /v1/completions HTTP/1.1\nHost: r\nContent-Length: 2\n\n{}", 400, CLOSE),
    ("space-in-name", head("Host: r", "Bad Name: x", "Content-Length: 2") + b"{}", 400, CLOSE),
    ("space-before-colon", head("Host : r", "Content-Length: 2") + b"{}", 400, CLOSE),
    ("nul-in-value", head("Host: r", "X-A: a\x00b", "Content-Length: 2") + b"{}", 400, CLOSE),
    ("lower-case-method", head("Host: r", line="post /v1/completions HTTP/1.1"), 400, CLOSE),
    ("not-http", b"BREW /v1/completions HTCPCP/1.0\r\n\r\n", 400, CLOSE),
    ("http09", head(line="GET /health HTTP/0.9"), 505, CLOSE),
    ("http09-no-version", b"GET /health\r\n\r\n", 505, CLOSE),
    ("http2-line", head("Host: r", line="GET /health HTTP/2.0"), 505, CLOSE),
    ("http12", head("Host: r", line="GET /health HTTP/1.2"), 400, CLOSE),
    ("129-fields", head("Host: r", *[f"X-F{i}: v" for i in range(128)]), 431, CLOSE),
    ("2700-same-fields", head("Host: r", *["X-Same: v"] * 2700), 431, CLOSE),
    ("long-field", head("Host: r", "X-Long: " + "a" * 8200), 431, CLOSE),
    ("head-over-64k-in-one-read", head("Host: r", *[f"X-F{i}: {'a' * 8000}" for i in range(9)]),
     431, CLOSE),
    ("long-target", head("Host: r", line=f"GET /{'a' * 8200} HTTP/1.1"), 414, CLOSE),
    ("length-over-limit", head("Host: r", f"Content-Length: {LIMIT + 1}"), 413, CLOSE),
    ("chunked-over-limit", head("Host: r", "Transfer-Encoding: chunked")
     + chunked(b"x" * (LIMIT + 1)), 413, CLOSE),
    ("upgrade-ignored", head("Host: r", "Upgrade: websocket", "Connection: Upgrade",
                             line="GET /health HTTP/1.1"), 200, CLOSE),
    ("connect", head("Host: r", line="CONNECT r:443 HTTP/1.1"), 404, CLOSE),
]  # fmt: skip


@pytest.mark.parametrize(
    ("wire", "status", "closes"),
    [case[1:] for case in REQUESTS],
    ids=[case[0] for case in REQUESTS],
)
def test_a_crafted_request_gets_its_status_and_the_router_stays_healthy(
    routed: tuple[RouterThread, EchoReplica], wire: bytes, status: int, closes: bool
) -> None:
    router, _ = routed
    with RawClient(router.url) as client:
        client.send(wire)
        answer = client.answer()
        assert answer.status == status, answer.body
        if status >= 400:
            error = json.loads(answer.body)["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert error["code"] == status
        if closes:
            assert client.closed_by_peer()
        else:
            client.send(post(GOOD))
            assert client.answer().status == 200
    assert get_status(f"{router.url}/health") == 200


def test_the_table_covers_at_least_thirty_requests() -> None:
    assert len(REQUESTS) >= 30


def test_an_answer_from_the_head_alone_is_sent_before_the_body_is_read(
    routed: tuple[RouterThread, EchoReplica],
) -> None:
    router, _ = routed
    with RawClient(router.url) as client:
        client.send(head("Host: r", "Expect: 100-continue", f"Content-Length: {len(GOOD)}"))
        time.sleep(0.2)
        client.send(GOOD)
        answer = client.answer()
    assert answer.interim == [100] and answer.status == 200


def test_pipelined_requests_split_anywhere_are_answered_in_order(
    routed: tuple[RouterThread, EchoReplica],
) -> None:
    router, echo = routed
    wire = (
        post(completion("first"))
        + head("Host: r", line="GET /v1/models HTTP/1.1")
        + post(completion("second"), "/v1/chat/completions")
        + post(completion("third"))
    )
    with RawClient(router.url) as client:
        for start, end in ((0, 7), (7, 90), (90, len(wire))):
            client.send(wire[start:end])
        answers = [client.answer() for _ in range(4)]

    assert [a.status for a in answers] == [200, 200, 400, 200]
    assert json.loads(answers[1].body)["object"] == "list"
    assert [body for _, body in echo.received[-2:]] == [completion("first"), completion("third")]


def test_every_route_is_served_on_one_kept_connection(
    routed: tuple[RouterThread, EchoReplica],
) -> None:
    router, _ = routed
    paths = ["/health", "/ready", "/metrics", "/v1/models"]  # /metrics: on its own port
    with RawClient(router.url) as client:
        for path in paths:
            client.send(head("Host: r", line=f"GET {path} HTTP/1.1"))
        answers = [client.answer() for _ in paths]
        client.send(post(completion("streamed", stream=True)))
        streamed = client.answer()
    with RawClient(router.metrics_url) as client:
        client.send(head("Host: r", line="GET /metrics HTTP/1.1"))
        metrics = client.answer()
    assert [a.status for a in answers] == [200, 200, 404, 200]
    assert not any("server" in a.headers for a in [*answers, streamed])  # no aiohttp behind
    assert b"orchestrator_router_requests_total" in metrics.body
    assert streamed.headers["content-type"] == "text/event-stream"
    assert streamed.headers["x-orchestrator-replica"] == "echo-0"
    assert streamed.body.endswith(b"data: [DONE]\n\n")


def test_a_head_trickled_a_byte_at_a_time_is_cut_off_at_the_head_timeout(
    routed: tuple[RouterThread, EchoReplica],
) -> None:
    router, _ = routed
    wire = post(GOOD)
    started = time.monotonic()
    with RawClient(router.url) as client:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for byte in wire[:30]:  # a byte every 0.1 s: the head is never whole in time
                client.send(bytes([byte]))
                time.sleep(0.1)
        answer = client.answer()
        assert client.closed_by_peer()
    assert answer.status == 408
    assert time.monotonic() - started < HEAD_TIMEOUT_S + 2.5
    assert get_status(f"{router.url}/health") == 200


def test_an_idle_connection_is_closed_after_the_idle_timeout(
    routed: tuple[RouterThread, EchoReplica],
) -> None:
    router, _ = routed
    with RawClient(router.url, timeout_s=10) as client:
        client.send(post(GOOD))
        assert client.answer().status == 200
        started = time.monotonic()
        assert client.closed_by_peer()
    assert 2.0 < time.monotonic() - started < 6.0


def test_repeated_fields_cost_about_what_distinct_ones_do(
    routed: tuple[RouterThread, EchoReplica],
) -> None:
    """Joining repeats is linear: 120 repeats of one name are answered as a normal request is."""
    router, _ = routed
    with RawClient(router.url) as client:
        client.send(post(GOOD, "/v1/completions", *["X-Same: value"] * 120))
        answer = client.answer()
    assert answer.status == 200


def test_stopping_lets_an_answer_in_progress_finish_and_closes_idle_connections() -> None:
    settings = ReplicaSettings(Generation.MI355X, time_scale=1.0, seed=5)  # real-time tokens
    long_stream = completion("Keep going.", max_tokens=300, ignore_eos=True, stream=True)

    async def test(replica_url: str) -> tuple[bytes, bytes]:
        table = parse_replicas(replicas_document([ReplicaEntry("rt-0", replica_url)]))
        server = RouterHttpServer(RouterService(TableHolder(table), profile_named("capacity")))
        port = await server.start()
        idle, _ = await asyncio.open_connection("127.0.0.1", port)
        busy, busy_writer = await asyncio.open_connection("127.0.0.1", port)
        busy_writer.write(post(long_stream))
        started = await busy.readuntil(b"data: ")

        stopping = asyncio.create_task(server.stop())
        idle_end = await asyncio.wait_for(idle.read(), 2)
        assert not stopping.done()  # still waiting for the stream
        rest = await asyncio.wait_for(busy.read(), 20)  # everything until the router closes
        await asyncio.wait_for(stopping, 10)
        return idle_end, started + rest

    with replica(settings) as server:
        idle_end, answer = asyncio.run(test(server.url))

    assert idle_end == b""
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    assert answer.count(b'"text":') >= 300
