"""A router under attack, for `test_router_attacks.py`: its HTTP and gRPC front ends on one event
loop (as `orchestrator router` runs them), API keys on, every bound set low so each attack hits
it with small payloads, one hostile replica behind it, and a `/health` probe that times the
router's answers throughout.

The hostile replica answers by the request's text: `huge` (a whole answer of `HUGE_BYTES`, with
its length), `huge-chunked` (the same, chunked), `break` (a stream that breaks mid-event), `flood`
(a stream of `FLOOD_EVENTS` events, as fast as it is read); anything else gets a small answer.
`GET /big-metrics` is a page of `PAGE_BYTES`, sent chunked, counting what it could send.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
from aiohttp import web
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from router_harness import MODEL, AppThread, ReplicaEntry, replicas_document

from orchestrator._proto.orchestrator.router.v1 import router_pb2_grpc as pb_grpc
from orchestrator.forwarding.breaker import BreakerSettings
from orchestrator.forwarding.upstream_settings import UpstreamSettings
from orchestrator.frontends.grpc.server import GrpcServer, GrpcSettings, start_grpc_server
from orchestrator.frontends.http.auth import ApiKeys
from orchestrator.frontends.http.limits import ConnectionSettings
from orchestrator.frontends.http.server import RouterHttpServer
from orchestrator.frontends.http.settings import HttpSettings
from orchestrator.router_service import RouterService, RouterSettings, profile_named
from orchestrator.table.source import TableHolder
from orchestrator.table.static_file import parse_replicas

SECRET = "sk-attack-5f0d8c2b9e41a7"  # the accepted key
WRONG = "sk-wrong-77c1e0b3d2f9"
PROMPT = "zebra-quartz-prompt-marker"  # text of every prompt sent; must never reach a log
MAX_BODY = 256 * 1024
MAX_ANSWER = 256 * 1024
HUGE_BYTES = 4 * 1024 * 1024
PAGE_BYTES = 32 * 1024 * 1024
FLOOD_EVENTS = 200_000  # about 28 MB: more than loopback socket buffers hold
LIMITS = ConnectionSettings(
    head_timeout_s=1.0,
    idle_s=1.5,
    body_timeout_s=2.0,
    write_buffer_bytes=64 * 1024,
    write_stall_s=1.0,
    cut_grace_s=1.0,
)
GRPC = GrpcSettings(
    grace_s=1.0, max_message_bytes=2 * 1024 * 1024, write_stall_s=0.5, handshake_s=1.0, idle_s=1.5
)
T = TypeVar("T")


def rss_mib() -> float:
    """This process's resident memory (the router runs in it)."""
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def chat_chunk(text: str) -> bytes:
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": None}
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": MODEL,
             "choices": [choice]}  # fmt: skip
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class HostileReplica:
    """See the module doc; `gone` counts streams whose reader went away before their end."""

    def __init__(self) -> None:
        self.gone = 0
        self.page_bytes_sent = 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_post("/v1/completions", self._complete)
        app.router.add_get("/health", self._ok)
        app.router.add_get("/metrics", self._page)
        app.router.add_get("/big-metrics", self._big_page)
        return app

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(
            text="vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"
            "vllm:kv_cache_usage_perc 0\nvllm:generation_tokens_total 0\n"
        )

    async def _big_page(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        piece = b"# " + b"x" * (64 * 1024 - 3) + b"\n"
        try:
            while self.page_bytes_sent < PAGE_BYTES:
                await response.write(piece)
                self.page_bytes_sent += len(piece)
        except (ConnectionError, RuntimeError):
            return response
        await response.write_eof()
        return response

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        text = body["messages"][0]["content"] if "messages" in body else body.get("prompt", "")
        if text == "huge":
            filler = "x" * HUGE_BYTES
            return web.json_response({"object": "chat.completion", "filler": filler})
        if text == "huge-chunked":
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            await response.write(b'{"filler": "')
            for _ in range(HUGE_BYTES // 65536):
                await response.write(b"x" * 65536)
            await response.write(b'"}')
            await response.write_eof()
            return response
        if not body.get("stream"):
            choice = {"index": 0, "message": {"role": "assistant", "content": "a b"},
                      "finish_reason": "stop"}  # fmt: skip
            usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
            return web.json_response({"object": "chat.completion", "choices": [choice],
                                      "usage": usage})  # fmt: skip
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if text == "break":
            await response.write(chat_chunk("one") + chat_chunk("two") + b'data: {"choi')
            await asyncio.sleep(0.05)
            assert request.transport is not None
            request.transport.abort()
            return response
        batches = FLOOD_EVENTS // 100 if text == "flood" else 1
        ended = False
        try:
            for batch in range(batches):
                await response.write(b"".join(chat_chunk(f"t{batch}.{i} ") for i in range(100)))
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            ended = True
        except (ConnectionError, RuntimeError):
            pass
        finally:
            self.gone += not ended
        return response


class HealthProbe:
    """Asks the router's `/health` on one kept connection every `every_s`, from a thread, and
    keeps the slowest answer since `reset()` (a refused or failed probe counts as infinitely
    slow)."""

    def __init__(self, port: int, every_s: float = 0.02) -> None:
        self._port = port
        self._every_s = every_s
        self._worst_s = 0.0
        self._probes = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> HealthProbe:
        self._thread.start()
        return self

    def _run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self._port, timeout=5)
        while not self._stop.is_set():
            if not self._probe(connection):
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", self._port, timeout=5)
            self._stop.wait(self._every_s)
        connection.close()

    def once(self) -> None:
        """One probe on a connection of its own (a row shorter than the probe interval)."""
        connection = http.client.HTTPConnection("127.0.0.1", self._port, timeout=5)
        self._probe(connection)
        connection.close()

    def _probe(self, connection: http.client.HTTPConnection) -> bool:
        started = time.monotonic()
        try:
            connection.request("GET", "/health")
            response = connection.getresponse()
            response.read()
            took_s = time.monotonic() - started if response.status == 200 else float("inf")
        except (OSError, http.client.HTTPException):
            took_s = float("inf")
        with self._lock:
            self._worst_s = max(self._worst_s, took_s)
            self._probes += 1
        return took_s != float("inf")

    def reset(self) -> None:
        with self._lock:
            self._worst_s, self._probes = 0.0, 0

    def worst(self) -> tuple[float, int]:
        """The slowest answer since `reset()` in seconds, and how many probes there were."""
        with self._lock:
            return self._worst_s, self._probes

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class AttackedRouter:
    """The router (HTTP and gRPC, keys on, low bounds) over one hostile replica."""

    def __init__(self) -> None:
        self.replica = HostileReplica()
        self._replica_thread = AppThread(self.replica.app).start()
        self.replica_url = self._replica_thread.url
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        settings = RouterSettings(  # every row's replica failure is meant: the circuit stays shut
            upstream=UpstreamSettings(max_answer_bytes=MAX_ANSWER),
            breaker=BreakerSettings(failure_threshold=1_000_000),
        )
        self.service = RouterService(
            TableHolder(parse_replicas(replicas_document([ReplicaEntry("r-0", self.replica_url)]))),
            profile_named("capacity"),
            settings=settings,
        )
        http = HttpSettings(
            max_body_bytes=MAX_BODY, api_keys=ApiKeys([SECRET]), stream_buffer_bytes=64 * 1024
        )
        self.http = RouterHttpServer(self.service, http, LIMITS)
        self.port = self.call(lambda: self.http.start())
        self.grpc: GrpcServer = self.call(
            lambda: start_grpc_server(self.service, "127.0.0.1", 0, GRPC)
        )
        self.grpc_target = f"127.0.0.1:{self.grpc.port}"
        self.probe = HealthProbe(self.port).start()

    def call(self, make: Callable[[], Awaitable[T]], timeout_s: float = 30.0) -> T:
        async def run() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout_s)

    def stub(self, *options: tuple[str, Any]) -> tuple[grpc.Channel, pb_grpc.RouterServiceStub]:
        channel = grpc.insecure_channel(self.grpc_target, options=list(options))
        return channel, pb_grpc.RouterServiceStub(channel)

    def metric(self, name: str, **labels: str) -> float:
        text = generate_latest(self.service.registry).decode()
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == name and labels.items() <= sample.labels.items()
        )

    def holds(self, client: socket.socket) -> bool:
        """Whether the router still has `client`'s connection open (matched by its address: the
        `/health` probe's own connection comes and goes beside it)."""
        address = client.getsockname()
        for connection in list(self.http.connections.live):
            transport = connection._transport
            if transport is not None and transport.get_extra_info("peername") == address:
                return True
        return False

    def write_buffers(self) -> list[int]:
        """Bytes each live connection holds for its client, unread."""
        return [c._behind() for c in list(self.http.connections.live)]

    def close(self) -> None:
        self.probe.stop()

        async def stop() -> None:
            await self.grpc.stop(grace_s=0.5)
            await self.http.stop()

        self.call(stop, 60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()
        self._replica_thread.stop()
