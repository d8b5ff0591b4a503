"""Real routers, real replicas, on loopback, for the router tests.

`AppThread` serves any aiohttp app (a replica) from its own thread and event loop (port 0);
`RouterServerThread` serves a `RouterService`'s HTTP API the way `orchestrator router` does
(`RouterHttpServer`, optionally over TLS); `running_router` builds one over a replicas document.
`SimProcess` runs `orchestrator sim serve` as a subprocess that a test can SIGKILL; it is always
killed when the test ends. `EchoReplica` is a tiny OpenAI-shaped replica that records every body
it receives and answers what the body asks for.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.frontends.http.limits import ConnectionSettings
from orchestrator.frontends.http.server import RouterHttpServer
from orchestrator.frontends.http.settings import HttpSettings
from orchestrator.router_service import RouterService, RouterSettings, profile_named
from orchestrator.table.source import TableHolder
from orchestrator.table.static_file import parse_replicas

MODEL = "openai/gpt-oss-120b"


SiteFactory = Callable[[web.AppRunner], web.BaseSite]


def tcp_site(runner: web.AppRunner) -> web.BaseSite:
    return web.TCPSite(runner, "127.0.0.1", 0)


class AppThread:
    """An aiohttp app served on 127.0.0.1:0 from a background thread until `stop()`."""

    def __init__(
        self, make_app: Callable[[], web.Application], make_site: SiteFactory = tcp_site
    ) -> None:
        self._make_app = make_app
        self._make_site = make_site
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._runner: web.AppRunner | None = None
        self._error: BaseException | None = None

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._start())
        except BaseException as error:  # surfaced to the test thread in start()
            self._error = error
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        if self._runner is not None:
            self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    async def _start(self) -> None:
        self._runner = web.AppRunner(self._make_app(), handler_cancellation=True, access_log=None)
        await self._runner.setup()
        await self._make_site(self._runner).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    def start(self) -> AppThread:
        self._thread.start()
        if not self._ready.wait(timeout=30):
            raise RuntimeError("app did not start within 30 s")
        if self._error is not None:
            raise RuntimeError("app failed to start") from self._error
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)


@dataclass(frozen=True)
class ReplicaEntry:
    replica_id: str
    url: str
    generation: str = "MI355X"
    engine: str = "sim"
    time_scale: float = 1.0


def replicas_document(replicas: Sequence[ReplicaEntry], model: str = MODEL) -> str:
    """A replicas file (kind: Replicas) listing `replicas`, one pool per generation."""
    lines = ["apiVersion: orchestrator/v1alpha1", "kind: Replicas", f"model: {model}", "replicas:"]
    for r in replicas:
        lines.append(
            f'  - {{id: {r.replica_id}, url: "{r.url}", pool: pool-{r.generation.lower()}, '
            f"site: lab, generation: {r.generation}, engine: {r.engine}, "
            f"timeScale: {r.time_scale}}}"
        )
    return "\n".join(lines) + "\n"


class RouterServerThread:
    """`service`'s HTTP API on 127.0.0.1:0 (HTTPS with `tls`) from a background thread and event
    loop until `stop()`; the server starts and stops the service."""

    def __init__(
        self,
        service: RouterService,
        http: HttpSettings | None = None,
        *,
        connection: ConnectionSettings | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.service = service
        self.server = RouterHttpServer(service, http, connection)
        self._tls = tls
        self.url = ""
        self.metrics_url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> RouterServerThread:
        self._thread.start()
        port = asyncio.run_coroutine_threadsafe(
            self.server.start(tls=self._tls, metrics=("127.0.0.1", 0)), self._loop
        ).result(30)
        scheme = "https" if self._tls else "http"
        self.url = f"{scheme}://127.0.0.1:{port}"
        self.metrics_url = f"{scheme}://127.0.0.1:{self.server.metrics_port}"
        METRICS_URLS[self.url] = self.metrics_url
        return self

    def stop(self) -> None:
        METRICS_URLS.pop(self.url, None)
        asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(90)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()


class RouterThread(RouterServerThread):
    """A router over a replicas document; `service` is its live `RouterService`."""

    def __init__(
        self,
        document: str,
        *,
        profile: str = "capacity",
        settings: RouterSettings | None = None,
        http: HttpSettings | None = None,
        connection: ConnectionSettings | None = None,
    ) -> None:
        service = RouterService(
            TableHolder(parse_replicas(document)),
            profile_named(profile),
            settings=settings or RouterSettings(),
        )
        super().__init__(service, http, connection=connection)

    def metric(self, name: str, **labels: str) -> float:
        return metric_value(self.url, name, **labels)


@contextmanager
def running_router(
    replicas: Sequence[ReplicaEntry],
    *,
    profile: str = "capacity",
    settings: RouterSettings | None = None,
    http: HttpSettings | None = None,
    connection: ConnectionSettings | None = None,
) -> Iterator[RouterThread]:
    router = RouterThread(
        replicas_document(replicas),
        profile=profile,
        settings=settings,
        http=http,
        connection=connection,
    ).start()
    try:
        yield router
    finally:
        router.stop()


# -- reading servers ------------------------------------------------------------------------------


METRICS_URLS: dict[str, str] = {}  # a harness router's API URL: its metrics port's URL


def metric_value(base_url: str, name: str, **labels: str) -> float:
    """Sum of the samples called `name` on `base_url/metrics` whose labels include `labels`; a
    router of this harness is read on its metrics port (its API port serves no `/metrics`)."""
    base_url = METRICS_URLS.get(base_url, base_url)
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def get_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def wait_until(condition: Callable[[], bool], timeout_s: float, interval_s: float = 0.02) -> bool:
    """Poll `condition` until it holds or `timeout_s` passes; says whether it held."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)
    return True


# -- replicas as processes ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class SimProcess:
    """`orchestrator sim serve` in a child process; `kill()` sends SIGKILL."""

    def __init__(self, generation: str = "MI355X", time_scale: float = 1.0, seed: int = 0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.time_scale = time_scale
        self.generation = generation
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "orchestrator", "--log-level", "WARNING", "sim", "serve",
                "--generation", generation, "--port", str(self.port),
                "--time-scale", str(time_scale), "--seed", str(seed),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        if not wait_until(lambda: get_status(f"{self.url}/health") == 200, timeout_s, 0.05):
            raise RuntimeError(f"simulated replica on {self.url} did not become healthy")

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


@contextmanager
def sim_processes(count: int, **kwargs: Any) -> Iterator[list[SimProcess]]:
    """`count` simulated replicas as subprocesses, healthy on entry, killed on exit."""
    processes: list[SimProcess] = []
    try:
        for seed in range(count):
            processes.append(SimProcess(seed=seed, **kwargs))
        for process in processes:
            process.wait_healthy()
        yield processes
    finally:
        for process in processes:
            process.kill()


# -- a replica that records what it gets ----------------------------------------------------------


@dataclass
class EchoReplica:
    """An OpenAI-shaped replica that keeps every body it receives, byte for byte.

    A body may ask for an answer: `"echo_status": 429` answers that status with an OpenAI error.
    A broken replica: `fail_status` answers every completion with that status; `hang_up` starts
    every answer (status and headers) and then drops the connection before any byte of it.
    A slow one: `end_after_done_s` waits that long between a stream's [DONE] and its body's end.
    Tests may change these fields while the replica serves.
    """

    fail_status: int | None = None
    hang_up: bool = False
    end_after_done_s: float = 0.0
    healthy: bool = True  # what `/health` says (200 or 503); a test may flip it
    metrics_page: str = (
        "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\n"
        "vllm:generation_tokens_total 0\n"
    )
    received: list[tuple[str, bytes]] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_post("/v1/completions", self._complete)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.healthy else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics_page)

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.received.append((request.path, raw))
        if self.fail_status is not None:
            return web.json_response({"error": "broken"}, status=self.fail_status)
        if self.hang_up:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            assert request.transport is not None
            request.transport.close()
            return response
        body = json.loads(raw)
        status = body.get("echo_status")
        if isinstance(status, int):
            error = {"message": "as asked", "type": "Echo", "param": None, "code": status}
            return web.json_response({"error": error}, status=status)
        usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        if not body.get("stream"):
            choice = {"index": 0, "text": " a b", "finish_reason": "length"}
            return web.json_response(
                {"object": "text_completion", "choices": [choice], "usage": usage}
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for text in (" a", " b"):
            choice = {"index": 0, "text": text, "finish_reason": None}
            await response.write(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        if self.end_after_done_s:
            await asyncio.sleep(self.end_after_done_s)
        await response.write_eof()
        return response


@contextmanager
def echo_replica(
    fail_status: int | None = None, hang_up: bool = False
) -> Iterator[tuple[EchoReplica, AppThread]]:
    echo = EchoReplica(fail_status=fail_status, hang_up=hang_up)
    server = AppThread(echo.app).start()
    try:
        yield echo, server
    finally:
        server.stop()
