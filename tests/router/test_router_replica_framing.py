"""The router's replica client framing crafted answers per RFC 9112: a well-framed answer reaches
the client whole (and its connection is kept only when the framing says it may be); an answer
that cannot be framed with certainty closes the replica connection and reaches the client as a
502 OpenAI error, or as the terminal event of a stream already under way. After each one the
router serves the next request, from the next answer, normally.

The replica is a raw TCP server answering each completion with the next scripted bytes; its
health and metrics pages answer plainly."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from router_harness import (
    MODEL,
    ReplicaEntry,
    RouterThread,
    get_status,
    running_router,
    wait_until,
)

BODY = json.dumps(
    {"object": "text_completion", "choices": [{"text": "ok"}], "usage": {"completion_tokens": 1}}
).encode()
EVENT = b'data: {"choices":[{"text":"a"}]}\n\n'
DONE = b"data: [DONE]\n\n"
SSE = "Content-Type: text/event-stream"


def answer(*fields: str, status: str = "200 OK", version: str = "HTTP/1.1") -> bytes:
    return (f"{version} {status}\r\n" + "".join(f"{f}\r\n" for f in fields) + "\r\n").encode()


def length(body: bytes = BODY) -> str:
    return f"Content-Length: {len(body)}"


def chunks(*pieces: bytes, end: bytes = b"0\r\n\r\n") -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + end


@dataclass
class Scripted:
    """An answer to send, and whether to close the connection right after it (a body framed by
    the connection's end, or one cut short)."""

    wire: bytes
    close: bool = False


@dataclass
class ScriptedReplica:
    """Answers completions from `script`, in order; a good answer when it runs out. `kept`
    records, for a scripted answer, whether the router sent another request on its connection
    (True) or closed it (False); nothing while the connection waits idle in the router's pool."""

    script: deque[Scripted] = field(default_factory=deque)
    kept: list[bool] = field(default_factory=list)
    url: str = ""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        scripted_last = False
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    if scripted_last:
                        self.kept.append(False)
                    return
                if scripted_last:
                    self.kept.append(True)
                    scripted_last = False
                size = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        size = int(line.split(b":")[1])
                await reader.readexactly(size)
                if head.startswith(b"GET "):
                    page = b"vllm:num_requests_running 0\n"
                    writer.write(answer(length(page)) + page)
                    continue
                from_script = bool(self.script)
                scripted = self.script.popleft() if from_script else Scripted(good())
                writer.write(scripted.wire)
                await writer.drain()
                if scripted.close:
                    if from_script:
                        self.kept.append(False)
                    return
                scripted_last = from_script
        finally:
            writer.close()


def good() -> bytes:
    return answer("Content-Type: application/json", length()) + BODY


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[RouterThread, ScriptedReplica]]:
    replica = ScriptedReplica()
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def start() -> asyncio.Server:
        return await asyncio.start_server(replica.serve, "127.0.0.1", 0)

    server = loop.run_until_complete(start())
    replica.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    thread = threading.Thread(target=lambda: (ready.set(), loop.run_forever()), daemon=True)
    thread.start()
    ready.wait()
    try:
        with running_router([ReplicaEntry("raw-0", replica.url, engine="external")]) as router:
            yield router, replica
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


def ask(router: RouterThread, *, stream: bool = False) -> tuple[int, bytes]:
    host, port = router.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=20)
    body = {"model": MODEL, "prompt": "x", "max_tokens": 1, "stream": stream}
    try:
        connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "x"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


OK, BAD = 200, 502
ANSWERS = [
    ("length", Scripted(good()), OK, BODY, True),
    ("chunked", Scripted(answer("Transfer-Encoding: chunked") + chunks(BODY[:9], BODY[9:])),
     OK, BODY, True),
    ("chunk-extension-and-trailer", Scripted(answer("Transfer-Encoding: chunked")
     + chunks(BODY, end=b"0;x=1\r\nX-Trailer: t\r\n\r\n")), OK, BODY, True),
    ("100-continue-first", Scripted(answer(status="100 Continue") + good()), OK, BODY, True),
    ("three-early-hints", Scripted(answer("Link: </a>", status="103 Early Hints") * 3 + good()),
     OK, BODY, True),
    ("http10-length", Scripted(answer(length(), version="HTTP/1.0") + BODY), OK, BODY, False),
    ("http10-keep-alive", Scripted(answer(length(), "Connection: keep-alive",
                                          version="HTTP/1.0") + BODY), OK, BODY, True),
    ("connection-close", Scripted(answer(length(), "Connection: close") + BODY), OK, BODY, False),
    ("close-among-tokens", Scripted(answer(length(), "Connection: x, Close") + BODY),
     OK, BODY, False),
    ("notclose-is-not-close", Scripted(answer(length(), "Connection: notclose") + BODY),
     OK, BODY, True),
    ("until-close", Scripted(answer() + BODY, close=True), OK, BODY, False),
    ("client-error-passed-on", Scripted(answer(length(b"{}"), status="429 Too Many") + b"{}"),
     429, b"{}", True),
    ("stray-bytes-after-answer", Scripted(good() + answer(length(b"stray")) + b"stray"),
     OK, BODY, False),
    ("superscript-digit-status", Scripted("HTTP/1.1 2²0 OK\r\n".encode() + length().encode()
     + b"\r\n\r\n" + BODY), BAD, b"", False),
    ("status-000", Scripted(answer(length(), status="000 Zero") + BODY), BAD, b"", False),
    ("status-099", Scripted(answer(length(), status="099 Low") + BODY), BAD, b"", False),
    ("status-1000", Scripted(answer(length(), status="1000 High") + BODY), BAD, b"", False),
    ("switching-protocols", Scripted(answer("Upgrade: x", status="101 Switching")),
     BAD, b"", False),
    ("20000-interim-answers", Scripted(answer(status="100 Continue") * 20_000 + good()),
     BAD, b"", False),
    ("chunked-and-length", Scripted(answer("Transfer-Encoding: chunked", length())
     + chunks(BODY)), BAD, b"", False),
    ("http10-chunked-keep-alive", Scripted(answer("Transfer-Encoding: chunked",
     "Connection: keep-alive", version="HTTP/1.0") + chunks(BODY)), BAD, b"", False),
    ("gzip-then-chunked", Scripted(answer("Transfer-Encoding: gzip, chunked") + chunks(BODY)),
     BAD, b"", False),
    ("space-in-field-name", Scripted(answer("Bad Name: x", length()) + BODY), BAD, b"", False),
    ("space-before-colon", Scripted(answer("X-A : y", length()) + BODY), BAD, b"", False),
    ("obs-fold", Scripted(answer("X-A: y", " folded", length()) + BODY), BAD, b"", False),
    ("nul-in-value", Scripted(answer("X-A: a\x00b", length()) + BODY), BAD, b"", False),
    ("bare-lf", Scripted(b"HTTP/1.1 200 OK\nContent-Length: 2\n\n{}"), BAD, b"", False),
    ("length-not-digits", Scripted(answer("Content-Length: 1a") + BODY), BAD, b"", False),
    ("length-negative", Scripted(answer("Content-Length: -1") + BODY), BAD, b"", False),
    ("two-lengths", Scripted(answer("Content-Length: 2", "Content-Length: 3") + b"{}"),
     BAD, b"", False),
    ("bad-chunk-size", Scripted(answer("Transfer-Encoding: chunked") + b"zz\r\n"),
     BAD, b"", False),
    ("chunk-without-crlf", Scripted(answer("Transfer-Encoding: chunked") + b"2\r\n{}XX0\r\n\r\n"),
     BAD, b"", False),
    ("head-over-64k", Scripted(answer("X-Big: " + "a" * 70_000, length()) + BODY),
     BAD, b"", False),
    ("http2-status-line", Scripted(answer(length(), version="HTTP/2.0") + BODY), BAD, b"", False),
    ("not-http", Scripted(b"SSH-2.0-OpenSSH_9.0\r\n\r\n"), BAD, b"", False),
    ("cut-short", Scripted(answer(length()) + BODY[:5], close=True), 503, b"", False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("scripted_answer", "status", "body", "kept"),
    [case[1:] for case in ANSWERS],
    ids=[case[0] for case in ANSWERS],
)
def test_a_crafted_replica_answer_is_framed_per_the_rfc_and_the_router_stays_healthy(
    scripted: tuple[RouterThread, ScriptedReplica],
    scripted_answer: Scripted,
    status: int,
    body: bytes,
    kept: bool,
) -> None:
    router, replica = scripted
    replica.kept.clear()
    replica.script.append(scripted_answer)
    errors = "orchestrator_router_upstream_errors_total"
    malformed_before = router.metric(errors, replica="raw-0", kind="malformed")

    got_status, got_body = ask(router)
    follow_status, follow_body = ask(router)  # from the next answer, never from stray bytes

    assert got_status == status, got_body
    if status < 500:
        assert got_body == body
    else:
        error = json.loads(got_body)["error"]
        assert error["code"] == status and set(error) == {"message", "type", "param", "code"}
    assert (follow_status, follow_body) == (200, BODY)
    if status == BAD:
        assert (
            router.metric(
                "orchestrator_router_upstream_errors_total", replica="raw-0", kind="malformed"
            )
            > malformed_before
        )
    if kept:
        assert False not in replica.kept
    else:
        assert wait_until(lambda: replica.kept[:1] == [False], 5)
    assert get_status(f"{router.url}/ready") == 200


def test_the_table_covers_at_least_thirty_answers() -> None:
    assert len(ANSWERS) >= 30


STREAMS = [
    ("ends-with-done", answer(SSE, "Transfer-Encoding: chunked") + chunks(EVENT, DONE),
     EVENT + DONE),
    ("ends-at-terminator-without-done", answer(SSE, "Transfer-Encoding: chunked")
     + chunks(EVENT, EVENT), EVENT + EVENT),
    ("framed-by-length", answer(SSE, length(EVENT + DONE)) + EVENT + DONE, EVENT + DONE),
]  # fmt: skip


@pytest.mark.parametrize(("wire", "relayed"), [c[1:] for c in STREAMS], ids=[c[0] for c in STREAMS])
def test_a_well_framed_stream_is_relayed_whole_with_or_without_done(
    scripted: tuple[RouterThread, ScriptedReplica], wire: bytes, relayed: bytes
) -> None:
    router, replica = scripted
    replica.script.append(Scripted(wire))
    status, body = ask(router, stream=True)
    assert (status, body) == (200, relayed)
    assert ask(router) == (200, BODY)


@pytest.mark.parametrize(
    "broken",
    [b"zz\r\n", b"2\r\n{}XX", b"\r\n\r\nHTTP/1.1 200 OK\r\n"],
    ids=["bad-chunk-size", "chunk-without-crlf", "garbage"],
)
def test_a_stream_whose_framing_breaks_ends_with_a_502_event(
    scripted: tuple[RouterThread, ScriptedReplica], broken: bytes
) -> None:
    router, replica = scripted
    replica.script.append(Scripted(answer(SSE, "Transfer-Encoding: chunked")
                                   + chunks(EVENT, end=b"") + broken, close=True))  # fmt: skip
    status, body = ask(router, stream=True)
    assert status == 200 and body.startswith(EVENT)
    terminal = body[body.rfind(b'data: {"error"') :]  # after whatever data came before the break
    assert terminal.endswith(DONE)
    error = json.loads(terminal.removesuffix(DONE).removeprefix(b"data: "))["error"]
    assert error["code"] == 502
    assert ask(router) == (200, BODY)
