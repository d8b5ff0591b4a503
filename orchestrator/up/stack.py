"""`orchestrator up` and `orchestrator control-plane`: start the pieces, report, stop them all.

`up` runs Ray (a local cluster, one node per site and generation), the control plane (in this
process) and a router (a child process following the control plane's table). It owns every process
it starts: SIGINT or SIGTERM, or a failure while starting, stops the router, the replicas, the
registry and every Ray node, in that order. Progress goes to stderr; the ready banner to stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from types import FrameType
from typing import Final, TypeVar

from orchestrator.config.schema import OrchestratorConfig
from orchestrator.controlplane.control_plane import ControlPlane
from orchestrator.controlplane.embedded_cluster import RayConnection
from orchestrator.controlplane.placement import node_groups
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.fabric.embedded import EmbeddedFabric, FabricStartFailed
from orchestrator.fabric.manifest import default_fabric_root
from orchestrator.monitoring.embedded import PrometheusRequest
from orchestrator.monitoring.local_prometheus import LocalPrometheus, PrometheusError
from orchestrator.security.files import TlsFiles
from orchestrator.up.admin import ControlPlaneClient, ControlPlaneUnreachable, Status
from orchestrator.up.prometheus import start_prometheus, usable_request
from orchestrator.up.watchdog import start_watchdog, stop_watchdog

STARTUP_TIMEOUT_S: Final = 300.0
ROUTER_STOP_TIMEOUT_S: Final = 10.0
_POLL_S: Final = 0.5
_PR_SET_PDEATHSIG: Final = 1
_STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)

T = TypeVar("T")
Progress = Callable[[str], None]


def print_progress(line: str) -> None:
    print(f"orchestrator up: {line}", file=sys.stderr, flush=True)


class StartupFailed(Exception):
    """Something `up` started did not come up; the message says what and why."""


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Where the stack listens once up; `exporters` are (simulated node, scrape URL) pairs, known
    once the fabric runs."""

    host: str
    http_port: int
    grpc_port: int
    metrics_port: int
    control_plane: str
    exporters: tuple[tuple[str, str], ...] = ()
    prometheus: str = ""


def run_up(
    config: OrchestratorConfig,
    *,
    host: str = "127.0.0.1",
    progress: Progress = print_progress,
    prometheus: PrometheusRequest | None = None,
) -> int:
    """Run the whole stack until SIGINT or SIGTERM; returns the exit status.

    0 after a clean stop on a signal, 1 when something failed to start (all of it stopped again).
    `prometheus` adds a local Prometheus scraping the stack (skipped when not installed).
    """
    endpoints = Endpoints(
        host=host,
        http_port=config.router.http_port,
        grpc_port=config.router.grpc_port,
        metrics_port=config.router.metrics_port,
        control_plane=f"127.0.0.1:{config.control_plane.grpc_port}",
    )
    _check_ports_free(config, host)
    prometheus = usable_request(prometheus, progress)
    started = time.monotonic()
    previous = signal.signal(signal.SIGTERM, _interrupt)
    ray_connection: RayConnection | None = None
    guard = start_watchdog()  # stops what follows should this process be killed outright
    try:
        groups = ", ".join(
            sorted({f"{p.site}/{p.generation.value}" for p in config.launched_pools})
        )
        progress(f"starting a local Ray cluster: a head node and one node per group ({groups})")
        ray_connection = RayConnection.start_local(config)
        signal.signal(
            signal.SIGTERM, _interrupt
        )  # each Ray node started put in a handler of its own
        progress(
            f"Ray is up ({time.monotonic() - started:.1f} s); session {ray_connection.session_dir}"
        )
        return asyncio.run(_serve(config, endpoints, ray_connection, started, progress, prometheus))
    except (KeyboardInterrupt, SystemExit):
        # SystemExit too: while a Ray node starts, its own SIGTERM handler stops its processes
        # and exits; the rest of the cluster is stopped below either way.
        progress("interrupted while starting; stopping what was started")
        return 130
    except StartupFailed as failure:
        print(f"orchestrator up: error: {failure}", file=sys.stderr, flush=True)
        return 1
    finally:
        with _signals_ignored():
            if ray_connection is not None:
                progress("stopping Ray")
                ray_connection.stop()
            stop_watchdog(guard)
        signal.signal(signal.SIGTERM, previous)
        progress("stopped")


def run_control_plane(
    config: OrchestratorConfig,
    *,
    ray_address: str | None,
    host: str,
    port: int | None,
    progress: Progress = print_progress,
    tls: TlsFiles | None = None,
    sd_port: int | None = None,
    health_only_clients: tuple[str, ...] = (),
) -> int:
    """Run only the control plane until SIGINT or SIGTERM, on an existing or a local Ray cluster.

    On an existing cluster the registry (detached) is left running, so a restarted control plane
    finds the replicas it had; a local cluster is stopped whole. `sd_port` also serves the
    engines' Prometheus HTTP service discovery (`/sd/engines`) on `host`, with `tls` when given.
    """
    previous = signal.signal(signal.SIGTERM, _interrupt)
    ray_connection: RayConnection | None = None
    guard = start_watchdog() if ray_address is None else None
    try:
        if ray_address is None:
            progress("starting a local Ray cluster")
            ray_connection = RayConnection.start_local(config)
        else:
            progress(f"connecting to the Ray cluster at {ray_address}")
            ray_connection = RayConnection.connect(ray_address)

        async def serve() -> None:
            control_plane = ControlPlane(
                config,
                host=host,
                port=port,
                tls=tls,
                sd_port=sd_port,
                health_only_clients=health_only_clients,
            )
            try:
                bound = await control_plane.start()
                print(f"orchestrator control plane on {host}:{bound}", flush=True)
                if control_plane.sd_url is not None:
                    print(f"engines' service discovery on {control_plane.sd_url}", flush=True)
                await _until_signal()
            finally:
                await control_plane.stop(remove_registry=ray_address is None)

        asyncio.run(serve())
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        with _signals_ignored():
            if ray_connection is not None:
                ray_connection.stop()
            if guard is not None:
                stop_watchdog(guard)
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """A second Ctrl-C or SIGTERM while Ray stops would leave its nodes running: ignore them."""
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in _STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM while a blocking start-up step runs: unwind like Ctrl-C, stopping what started."""
    raise KeyboardInterrupt


def _check_ports_free(config: OrchestratorConfig, host: str) -> None:
    """Fail before starting anything when a port the stack needs is taken."""
    wanted = {
        "router.httpPort": (host, config.router.http_port),
        "router.grpcPort": (host, config.router.grpc_port),
        "router.metricsPort": ("127.0.0.1", config.router.metrics_port),
        "controlPlane.grpcPort": ("127.0.0.1", config.control_plane.grpc_port),
    }
    if config.control_plane.http_sd_port is not None:
        wanted["controlPlane.httpSdPort"] = ("127.0.0.1", config.control_plane.http_sd_port)
    if config.exporters.port:
        # Node k's exporter takes exporters.port + k, one node per (site, generation).
        for k in range(len(node_groups(config))):
            field = "exporters.port" if k == 0 else f"exporters.port + {k}"
            wanted[field] = (host, config.exporters.port + k)
    for field, (address, port) in wanted.items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, port))
            except OSError as error:
                raise OrchestratorError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"{field}: port {port} on {address} is not free ({error.strerror}); "
                    "is another orchestrator running? choose another port in the config"
                    + (" (exporters.port: 0 picks free ones)" if "exporters" in field else ""),
                    param=field.split(" ")[0],  # "exporters.port + 1" is exporters.port
                ) from None


async def _until_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in _STOP_SIGNALS:
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()


async def _serve(
    config: OrchestratorConfig,
    endpoints: Endpoints,
    ray_connection: RayConnection,
    started: float,
    progress: Progress,
    prometheus_request: PrometheusRequest | None = None,
) -> int:
    stopping = asyncio.create_task(_until_signal())
    # With --prometheus, the engines are found through the control plane's service discovery.
    sd_port = config.control_plane.http_sd_port
    control_plane = ControlPlane(
        config,
        port=config.control_plane.grpc_port,
        sd_port=(sd_port or 0) if prometheus_request is not None else sd_port,
    )
    router: subprocess.Popen[bytes] | None = None
    fabric: EmbeddedFabric | None = None
    prometheus: LocalPrometheus | None = None
    try:
        progress("starting the control plane (registry, pool reconciler, gRPC)")
        await control_plane.start()
        progress(f"control plane on {endpoints.control_plane}; placing replicas")
        router = _start_router(config, endpoints)
        progress(
            f"router starting on http://{endpoints.host}:{endpoints.http_port} (pid {router.pid})"
        )
        status = await _first(
            stopping, _until_ready(config, endpoints, control_plane, router, progress)
        )
        if status is None:
            progress("stopping")
            return 0
        fabric = EmbeddedFabric(
            default_fabric_root(endpoints.control_plane),
            control_plane=endpoints.control_plane,
            spec=config.fabric_health,
            host=endpoints.host,
            first_port=config.exporters.port,
        )
        progress("starting the simulated fabric: per node a sysfs tree, exporter, health reporter")
        try:
            await fabric.start()
        except FabricStartFailed as error:
            raise StartupFailed(f"the simulated fabric did not start: {error}") from None
        endpoints = replace(endpoints, exporters=tuple(fabric.exporter_urls.items()))
        if prometheus_request is not None:
            progress("starting Prometheus: the shipped rules over the router, engines, exporters")
            try:
                prometheus = await start_prometheus(
                    prometheus_request,
                    router=f"127.0.0.1:{endpoints.metrics_port}",
                    control_plane=control_plane,
                    fabric=fabric,
                    latency_scale=config.router.latency_scale or 1.0,
                )
            except PrometheusError as error:
                raise StartupFailed(f"Prometheus did not start: {error}") from None
            endpoints = replace(endpoints, prometheus=prometheus.url)
        print(
            banner(
                config, endpoints, status, time.monotonic() - started, ray_connection.session_dir
            ),
            flush=True,
        )
        exited = asyncio.create_task(asyncio.to_thread(router.wait))
        done, _ = await asyncio.wait({stopping, exited}, return_when=asyncio.FIRST_COMPLETED)
        if exited in done:
            print(
                f"orchestrator up: error: the router exited with status {router.returncode}",
                file=sys.stderr,
                flush=True,
            )
            return 1
        progress("stopping")
        return 0
    finally:
        stopping.cancel()
        if prometheus is not None:
            progress("stopping Prometheus")
            prometheus.stop()
        if fabric is not None:
            progress("stopping the simulated fabric")
            await fabric.stop()
        if router is not None:
            progress("stopping the router")
            _stop_router(router)
        progress("stopping the control plane and its replicas")
        await control_plane.stop(remove_registry=True)


async def _first(stopping: asyncio.Task[None], work: Awaitable[T]) -> T | None:
    """`work`'s result, or None when a signal comes first (then `work` is cancelled)."""
    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait({stopping, task}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return None


def _start_router(config: OrchestratorConfig, endpoints: Endpoints) -> subprocess.Popen[bytes]:
    """The router as a child process that dies with this one (`PR_SET_PDEATHSIG`), in a session
    of its own so a terminal's Ctrl-C reaches only `up`, which then stops it in order."""
    command = [
        sys.executable, "-m", "orchestrator", "--log-level", "WARNING", "router",
        "--control-plane", endpoints.control_plane,
        "--host", endpoints.host,
        "--port", str(endpoints.http_port),
        "--grpc-port", str(endpoints.grpc_port),
        "--metrics-port", str(endpoints.metrics_port),  # on loopback (the default host)
        "--profile", config.router.profile,
        "--latency-scale", str(config.router.latency_scale or 1.0),
        *config.router.admission.router_flags(),
        *config.router.slo.router_flags(),
    ]  # fmt: skip
    return subprocess.Popen(command, start_new_session=True, preexec_fn=_die_with_parent)


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _stop_router(router: subprocess.Popen[bytes]) -> None:
    if router.poll() is None:
        router.terminate()
    try:
        router.wait(ROUTER_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        router.kill()
        router.wait()


async def _until_ready(
    config: OrchestratorConfig,
    endpoints: Endpoints,
    control_plane: ControlPlane,
    router: subprocess.Popen[bytes],
    progress: Progress,
) -> Status:
    """Wait until every launched pool has its replicas ready and the router routes to them all."""
    client = ControlPlaneClient(endpoints.control_plane)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    desired = {p.name: p.replicas or 0 for p in config.launched_pools}
    said = ""
    while True:
        if router.poll() is not None:
            raise StartupFailed(f"the router exited with status {router.returncode} while starting")
        try:
            status = await asyncio.to_thread(client.status)
        except ControlPlaneUnreachable:
            status = None
        if status is not None:
            ready = {p.name: p.ready for p in status.pools}
            pools_ready = all(ready.get(name, 0) >= size for name, size in desired.items())
            routable = await asyncio.to_thread(_routable, endpoints)
            line = ", ".join(
                f"{name} {ready.get(name, 0)}/{size}" for name, size in desired.items()
            )
            line = f"replicas ready: {line}; router routes to {routable}"
            if line != said:
                progress(line)
                said = line
            if pools_ready and routable >= sum(desired.values()):
                return status
        if time.monotonic() > deadline:
            reasons = [
                u.reason
                for u in (control_plane.reconciler.unplaceable if control_plane.reconciler else [])
            ]
            raise StartupFailed(
                f"not ready within {STARTUP_TIMEOUT_S:g} s ({said or 'no status'})"
                + (f"; unplaceable: {'; '.join(reasons)}" if reasons else "")
            )
        await asyncio.sleep(_POLL_S)


def _routable(endpoints: Endpoints) -> int:
    """Replicas the router would route to now (its `/ready`), 0 while it does not answer."""
    url = f"http://{endpoints.host}:{endpoints.http_port}/ready"
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            body = response.read()
    except OSError as error:
        body = getattr(error, "read", lambda: b"")()
        if not body:
            return 0
    with contextlib.suppress(ValueError):
        return int(json.loads(body).get("routable_replicas", 0))
    return 0


def banner(
    config: OrchestratorConfig,
    endpoints: Endpoints,
    status: Status,
    elapsed_s: float,
    session_dir: str | None,
) -> str:
    """The ready banner: where to send requests, what serves them, and a request to try."""
    base = f"http://{endpoints.host}:{endpoints.http_port}"
    capacity: dict[str, float] = {}
    for replica in status.replicas:
        capacity.setdefault(replica.pool, replica.capacity_tokens_per_s)
    pools = [
        f"    {p.name:<14} {p.site:<4} {p.generation:<7} {p.engine:<6} "
        f"{p.ready}/{'-' if p.desired is None else p.desired} ready"
        f"  ~{capacity.get(p.name, 0):.0f} tok/s per replica"
        for p in status.pools
    ]
    request = json.dumps(
        {
            "model": config.model,
            "messages": [{"role": "user", "content": "Hello!"}],
            "max_tokens": 32,
        }
    )
    return "\n".join(
        [
            f"orchestrator is up ({elapsed_s:.1f} s)",
            f"  OpenAI API      {base}/v1  (model {config.model})",
            f"  gRPC inference  {endpoints.host}:{endpoints.grpc_port}",
            f"  control plane   {endpoints.control_plane}  (orchestrator status)",
            f"  metrics         http://127.0.0.1:{endpoints.metrics_port}/metrics",
            f"  Ray session     {session_dir}",
            *(
                f"  exporter        {url}  (node {node}; orchestrator fault --help)"
                for node, url in endpoints.exporters
            ),
            *(
                [f"  prometheus      {endpoints.prometheus}  (rules loaded; Grafana: dashboards/)"]
                if endpoints.prometheus
                else []
            ),
            "  pools:",
            *pools,
            "  try:",
            f"    curl -s {base}/v1/chat/completions -H 'Content-Type: application/json' \\",
            f"      -d '{request}'",
            "  Ctrl-C stops everything.",
        ]
    )
