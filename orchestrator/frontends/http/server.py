"""Serve the router's HTTP API from one or more worker processes sharing one port.

Each worker is a whole router (its own event loop, upstream pool, scraper, breakers and metrics);
with more than one, every worker binds the port with `SO_REUSEPORT` and the kernel spreads
connections across them. A worker's `/metrics` shows that worker's own counters. uvloop runs the
event loop when it is installed. Connections start in the completions fast lane (`fast_lane.py`)
and move to aiohttp at the first request the fast lane leaves to it. With TLS (`Listen.tls`),
aiohttp serves every request itself, over a context that follows certificate rotation; plaintext
connections to a TLS port fail their handshake and get no answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import multiprocessing
import signal
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess

from aiohttp import web

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.frontends.http.app import HttpSettings, build_app
from orchestrator.frontends.http.fast_lane import FastLaneSite
from orchestrator.router_service import RouterConfig, RouterService
from orchestrator.security.files import TlsFiles
from orchestrator.security.http_tls import ReloadingServerContext

log = logging.getLogger(__name__)

BACKLOG = 2048

Companion = Callable[[RouterService], contextlib.AbstractAsyncContextManager[object]]
"""Another server sharing a worker's `RouterService` (the gRPC frontend, say): entered once the
HTTP site listens, left before it stops. To reach spawned workers it must pickle: a module-level
function, or a `functools.partial` of one."""


@dataclass(frozen=True, slots=True)
class Listen:
    """Where to serve: address, port (0 picks a free one), worker processes, and the TLS files
    (None: plaintext HTTP; with a client CA, clients must present a certificate it signed)."""

    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    tls: TlsFiles | None = None

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
) -> None:
    """Serve until SIGINT or SIGTERM (or cancellation), then stop cleanly.

    Call from the main thread (signal handlers); `on_listening` gets the bound port. `tls`
    serves HTTPS (bad files raise `OrchestratorError` before anything listens).
    """
    context = None if tls is None else ReloadingServerContext(tls).context
    runner = web.AppRunner(build_app(service, http), handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        site: web.BaseSite
        if context is None:
            site = FastLaneSite(runner, host, port, reuse_port=reuse_port, backlog=BACKLOG)
        else:
            site = web.TCPSite(
                runner, host, port, ssl_context=context, reuse_port=reuse_port, backlog=BACKLOG
            )
        try:
            await site.start()
        except OSError as error:
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT,
                f"cannot listen on {host}:{port}: {error.strerror or error}",
                param="port",
            ) from None
        async with contextlib.AsyncExitStack() as stack:
            for companion in companions:
                await stack.enter_async_context(companion(service))
            if on_listening is not None:
                on_listening(runner.addresses[0][1])
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stop.set)
            await stop.wait()
    finally:
        await runner.cleanup()


def _announce(listen: Listen) -> Callable[[int], None]:
    def announce(port: int) -> None:
        plural = "s" if listen.workers > 1 else ""
        print(
            f"orchestrator router on {listen.scheme}://{listen.host}:{port} "
            f"({listen.workers} worker{plural})",
            file=sys.stderr,
            flush=True,
        )

    return announce


def run_worker(
    config: RouterConfig,
    http: HttpSettings,
    listen: Listen,
    *,
    reuse_port: bool,
    log_level: str = "INFO",
    announce: bool = False,
    companions: Sequence[Companion] = (),
) -> None:
    """One worker process: build the router from `config` and serve until told to stop."""
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
        if announce_port is not None:
            announce_port(port)

    async def main() -> None:
        service = RouterService.from_config(config)
        await serve_until_stopped(
            service,
            http,
            listen.host,
            listen.port,
            reuse_port=reuse_port,
            on_listening=listening,
            companions=companions,
            tls=listen.tls,
        )

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


def serve(
    config: RouterConfig,
    http: HttpSettings,
    listen: Listen,
    log_level: str = "INFO",
    companions: Sequence[Companion] = (),
) -> int:
    """Run the router in this process (one worker) or in `listen.workers` child processes.

    With several workers and port 0, the parent reserves a free port with `SO_REUSEPORT` (bound,
    never listening, so it takes no connections) and every worker joins it. Returns an exit
    status: 0 after a clean stop, the first failed worker's status otherwise.
    """
    if listen.workers <= 1:
        run_worker(
            config,
            http,
            listen,
            reuse_port=False,
            log_level=log_level,
            announce=True,
            companions=companions,
        )
        return 0
    with _reserved_port(listen.host, listen.port) as port:
        shared = Listen(listen.host, port, listen.workers, listen.tls)
        context = multiprocessing.get_context("spawn")
        workers = [
            context.Process(
                target=run_worker,
                args=(config, http, shared),
                kwargs={"reuse_port": True, "log_level": log_level, "companions": companions},
                name=f"router-worker-{index}",
            )
            for index in range(listen.workers)
        ]
        for worker in workers:
            worker.start()
        _announce(listen)(port)
        return _supervise(workers)


@contextlib.contextmanager
def _reserved_port(host: str, port: int) -> Iterator[int]:
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
