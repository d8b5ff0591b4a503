"""Serve the router's HTTP API from one or more worker processes sharing one port.

Every route, plaintext or TLS, runs on one connection protocol (`connection.py`, llhttp) over one
route table (`app.build_routes`). Each worker is a whole router (its own event loop, upstream
pool, scraper, breakers, metrics, per-key limits and admission); with more than one, every
worker binds the port with `SO_REUSEPORT` and the kernel spreads connections across them. A
worker's `/metrics` shows that worker's own counters. uvloop runs the event loop when it is
installed. With TLS (`Listen.tls`) asyncio's SSL transport carries the same connections, over a
context that follows certificate rotation; plaintext connections to a TLS port fail their
handshake and get no answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import multiprocessing
import signal
import socket
import ssl
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from typing import Final

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.frontends.http.app import OpenAiFrontend, build_routes, metrics_routes
from orchestrator.frontends.http.connections import Connections
from orchestrator.frontends.http.limits import ConnectionSettings
from orchestrator.frontends.http.settings import HttpSettings
from orchestrator.router_service import RouterService
from orchestrator.security.files import TlsFiles
from orchestrator.security.http_tls import ReloadingServerContext

log = logging.getLogger(__name__)

BACKLOG: Final = 2048
GC_YOUNG_THRESHOLD: Final = 10_000  # allocations (net) between young collections; default 700

Companion = Callable[[RouterService], contextlib.AbstractAsyncContextManager[object]]
"""Another server sharing a worker's `RouterService` (the gRPC frontend, the control plane's
routing-table watch): entered once the HTTP server listens, left before it stops. To reach
spawned workers it must pickle: a module-level function, or a `functools.partial` of one."""

ServiceFactory = Callable[[], RouterService]
"""Builds one worker's `RouterService` (a replicas file's, or an empty table that a companion
fills from the control plane); must pickle, as `Companion`."""


@dataclass(frozen=True, slots=True)
class Listen:
    """Where to serve: address, port (0 picks a free one), worker processes, and the TLS files
    (None: plaintext HTTP; with a client CA, clients must present a certificate it signed).
    `/metrics` is served on `metrics_host:metrics_port` (None: not at all), never the API port."""

    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    tls: TlsFiles | None = None
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None

    @property
    def scheme(self) -> str:
        return "http" if self.tls is None else "https"


def use_uvloop() -> bool:
    """Make new event loops uvloop's when it is installed; says whether it is."""
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


class RouterHttpServer:
    """The HTTP API of one `RouterService` on one listening socket; `start()` starts the
    service too, `stop()` lets answers in progress finish (within the grace) and stops it."""

    def __init__(
        self,
        service: RouterService,
        settings: HttpSettings | None = None,
        connection: ConnectionSettings | None = None,
    ) -> None:
        settings = settings or HttpSettings()
        self.service = service
        self.frontend = OpenAiFrontend(service, settings)
        service.use_api_keys(settings.api_keys)  # the gRPC front end checks the same keys
        limits = dataclasses.replace(
            connection or ConnectionSettings(),
            max_body_bytes=settings.max_body_bytes,
            stream_buffer_bytes=settings.stream_buffer_bytes,
        )
        self.connections = Connections(build_routes(self.frontend), limits, self.frontend.count)
        self.metrics_connections = Connections(metrics_routes(self.frontend), limits)
        self._server: asyncio.Server | None = None
        self._metrics_server: asyncio.Server | None = None
        self.port = 0
        self.metrics_port = 0

    async def start(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        tls: ssl.SSLContext | None = None,
        reuse_port: bool = False,
        backlog: int = BACKLOG,
        metrics: tuple[str, int] | None = None,
    ) -> int:
        """Start the service, then listen (and serve `/metrics` on `metrics`, host and port, if
        given: see `.metrics_port`); returns the bound API port. A port that cannot be bound
        raises `OrchestratorError` (after the service is stopped again)."""
        await self.service.start()
        loop = asyncio.get_running_loop()
        try:
            listen = partial(_listen, loop, tls=tls, backlog=backlog, reuse_port=reuse_port)
            self._server = await listen(self.connections, host, port, "port")
            if metrics is not None:
                self._metrics_server = await listen(self.metrics_connections, *metrics,
                                                    "metrics_port")  # fmt: skip
        except OrchestratorError:
            if self._server is not None:
                self._server.close()
            await self.service.stop()
            raise
        self.connections.start()
        self.port = self._server.sockets[0].getsockname()[1]
        if self._metrics_server is not None:
            self.metrics_connections.start()
            self.metrics_port = self._metrics_server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        for server, connections in (
            (self._metrics_server, self.metrics_connections),
            (self._server, self.connections),
        ):
            if server is not None:
                server.close()
                await connections.stop()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(server.wait_closed(), timeout=5)
        self._server = self._metrics_server = None
        await self.service.stop()


async def _listen(
    loop: asyncio.AbstractEventLoop,
    connections: Connections,
    host: str,
    port: int,
    param: str,
    *,
    tls: ssl.SSLContext | None,
    backlog: int,
    reuse_port: bool,
) -> asyncio.Server:
    try:
        return await loop.create_server(
            connections, host, port, ssl=tls, backlog=backlog, reuse_port=reuse_port or None
        )
    except OSError as error:
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            f"cannot listen on {host}:{port}: {error.strerror or error}",
            param=param,
        ) from None


async def serve_until_stopped(
    service: RouterService,
    http: HttpSettings,
    host: str,
    port: int,
    *,
    reuse_port: bool = False,
    on_listening: Callable[[int], None] | None = None,
    companions: Sequence[Companion] = (),
    tls: TlsFiles | None = None,
    metrics: tuple[str, int] | None = None,
) -> None:
    """Serve until SIGINT or SIGTERM (or cancellation), then stop cleanly.

    Call from the main thread (signal handlers); `on_listening` gets the bound port. `tls`
    serves HTTPS (bad files raise `OrchestratorError` before anything listens); `metrics`
    (host, port) serves `/metrics`.
    """
    context = None if tls is None else ReloadingServerContext(tls).context
    server = RouterHttpServer(service, http)
    bound = await server.start(host, port, tls=context, reuse_port=reuse_port, metrics=metrics)
    try:
        async with contextlib.AsyncExitStack() as stack:
            for companion in companions:
                await stack.enter_async_context(companion(service))
            if on_listening is not None:
                on_listening(bound)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stop.set)
            await stop.wait()
    finally:
        await server.stop()


def _announce(listen: Listen) -> Callable[[int], None]:
    def announce(port: int) -> None:
        plural = "s" if listen.workers > 1 else ""
        metrics = (
            ""
            if listen.metrics_port is None
            else (
                f"; metrics on {listen.scheme}://{listen.metrics_host}:{listen.metrics_port}/metrics"
            )
        )
        print(
            f"orchestrator router on {listen.scheme}://{listen.host}:{port} "
            f"({listen.workers} worker{plural}){metrics}",
            file=sys.stderr,
            flush=True,
        )

    return announce


def run_worker(
    make_service: ServiceFactory,
    http: HttpSettings,
    listen: Listen,
    *,
    reuse_port: bool,
    log_level: str = "INFO",
    announce: bool = False,
    companions: Sequence[Companion] = (),
) -> None:
    """One worker process: build the router with `make_service` and serve until told to stop."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    use_uvloop()

    announce_port = _announce(listen) if announce else None

    def listening(port: int) -> None:
        # Everything built so far lives as long as the worker: out of the cyclic collector's
        # sight, a full collection no longer walks it (~13 ms on a small VM, a latency spike
        # for whichever request it lands on).
        gc.freeze()
        # The requests in flight are a steady crowd of young objects that die by reference
        # count (the request path makes no cycles; a test holds error answers to that too); at
        # the default threshold (700) their coming and going set off a young collection every
        # few dozen requests that walks the crowd and frees nothing, 5-10% of a busy worker's
        # CPU. Cycles are still collected.
        gc.set_threshold(GC_YOUNG_THRESHOLD)
        if announce_port is not None:
            announce_port(port)

    async def main() -> None:
        service = make_service()
        await serve_until_stopped(
            service,
            http,
            listen.host,
            listen.port,
            reuse_port=reuse_port,
            on_listening=listening,
            companions=companions,
            tls=listen.tls,
            metrics=None
            if listen.metrics_port is None
            else (listen.metrics_host, listen.metrics_port),
        )

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


def serve(
    make_service: ServiceFactory,
    http: HttpSettings,
    listen: Listen,
    log_level: str = "INFO",
    companions: Sequence[Companion] = (),
) -> int:
    """Run the router in this process (one worker) or in `listen.workers` child processes,
    each building its own service with `make_service` and entering every companion.

    With several workers and port 0, the parent reserves a free port with `SO_REUSEPORT` (bound,
    never listening, so it takes no connections) and every worker joins it. Returns an exit
    status: 0 after a clean stop, the first failed worker's status otherwise.
    """
    if listen.workers <= 1:
        run_worker(
            make_service,
            http,
            listen,
            reuse_port=False,
            log_level=log_level,
            announce=True,
            companions=companions,
        )
        return 0
    with (
        _reserved_port(listen.host, listen.port) as port,
        _reserved_port(listen.metrics_host, listen.metrics_port) as metrics_port,
    ):
        assert port is not None
        shared = dataclasses.replace(listen, port=port, metrics_port=metrics_port)
        context = multiprocessing.get_context("spawn")
        workers = [
            context.Process(
                target=run_worker,
                args=(make_service, http, shared),
                kwargs={"reuse_port": True, "log_level": log_level, "companions": companions},
                name=f"router-worker-{index}",
            )
            for index in range(listen.workers)
        ]
        for worker in workers:
            worker.start()
        _announce(shared)(port)
        return _supervise(workers)


@contextlib.contextmanager
def _reserved_port(host: str, port: int | None) -> Iterator[int | None]:
    if port != 0:
        yield port
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind((host, 0))
        yield holder.getsockname()[1]


def _supervise(workers: Sequence[BaseProcess]) -> int:
    """Wait for the workers; on a signal, or when one exits, stop the rest and return."""
    stopping = False

    def stop(signum: int, _: object) -> None:
        nonlocal stopping
        stopping = True

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    status = 0
    try:
        while not stopping:
            exited = [w for w in workers if not w.is_alive()]
            failed = [w for w in exited if w.exitcode]
            if failed:
                code = failed[0].exitcode or 1
                log.error("router worker %s exited with %d; stopping", failed[0].name, code)
                status = code if code > 0 else 1
            if exited:
                break
            wait([w.sentinel for w in workers], timeout=0.5)
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
                worker.join()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return status
