"""`orchestrator up`: start the embedded stack, report, stop it all.

`up` runs Ray (a local cluster, one node per site and generation), the control plane (in this
process), a router (a child process following the control plane's table), the simulated fabric
and, when asked, a local Prometheus. It owns every process it starts: SIGINT or SIGTERM, or a
failure while starting, stops them in the reverse order of their start (Prometheus, the fabric,
the router, the replicas and the registry, every Ray node). Progress goes to stderr; the ready
banner to stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from orchestrator.config.schema import OrchestratorConfig
from orchestrator.controlplane.control_plane import ControlPlane
from orchestrator.controlplane.lifetime import Progress, ray_session, until_stop_signal
from orchestrator.fabric.embedded import EmbeddedFabric, FabricStartFailed
from orchestrator.fabric.manifest import default_fabric_root
from orchestrator.monitoring.embedded import PrometheusRequest
from orchestrator.monitoring.local_prometheus import LocalPrometheus, PrometheusError
from orchestrator.up.banner import Endpoints, banner
from orchestrator.up.ports import check_ports_free
from orchestrator.up.prometheus import start_prometheus, usable_request
from orchestrator.up.readiness import StartupFailed, first, until_ready
from orchestrator.up.router_child import running_router


def print_progress(line: str) -> None:
    print(f"orchestrator up: {line}", file=sys.stderr, flush=True)


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
    check_ports_free(config, host)
    prometheus = usable_request(prometheus, progress)
    started = time.monotonic()
    groups = ", ".join(sorted({f"{p.site}/{p.generation.value}" for p in config.launched_pools}))
    progress(f"starting a local Ray cluster: a head node and one node per group ({groups})")
    try:
        with ray_session(config, ray_address=None, progress=progress) as ray_connection:
            progress(
                f"Ray is up ({time.monotonic() - started:.1f} s); "
                f"session {ray_connection.session_dir}"
            )
            up = _Started(started, ray_connection.session_dir)
            try:
                return asyncio.run(_serve(config, endpoints, up, progress, prometheus))
            except StartupFailed as failure:
                print(f"orchestrator up: error: {failure}", file=sys.stderr, flush=True)
                return 1
    except (KeyboardInterrupt, SystemExit):
        # SystemExit too: while a Ray node starts, its own SIGTERM handler stops its processes
        # and exits; the rest of the cluster was stopped on the way out either way.
        progress("interrupted while starting; what was started is stopped")
        return 130
    finally:
        progress("stopped")


@dataclass(frozen=True, slots=True)
class _Started:
    """When `up` started (monotonic seconds) and the Ray session it runs in, for the banner."""

    at_s: float
    session_dir: str | None


async def _serve(
    config: OrchestratorConfig,
    endpoints: Endpoints,
    started: _Started,
    progress: Progress,
    prometheus_request: PrometheusRequest | None,
) -> int:
    """Start the stack's parts in order, print the banner, serve until a stop signal (0) or the
    router's exit (1); the parts stop in the reverse order of their start however this ends."""
    stopping = asyncio.create_task(until_stop_signal())
    try:
        async with contextlib.AsyncExitStack() as parts:
            # With --prometheus, the engines are found through the control plane's service
            # discovery.
            sd_port = config.control_plane.http_sd_port
            control_plane = await parts.enter_async_context(
                _running_control_plane(
                    config,
                    endpoints,
                    (sd_port or 0) if prometheus_request is not None else sd_port,
                    progress,
                )
            )
            router = parts.enter_context(running_router(config, endpoints, progress))
            ready = until_ready(config, endpoints, control_plane, router, progress)
            status = await first(stopping, ready)
            if status is None:
                progress("stopping")
                return 0
            fabric = await parts.enter_async_context(_running_fabric(config, endpoints, progress))
            endpoints = replace(endpoints, exporters=tuple(fabric.exporter_urls.items()))
            if prometheus_request is not None:
                prometheus = await parts.enter_async_context(
                    _running_prometheus(
                        prometheus_request, config, endpoints, control_plane, fabric, progress
                    )
                )
                endpoints = replace(endpoints, prometheus=prometheus.url)
            elapsed_s = time.monotonic() - started.at_s
            print(banner(config, endpoints, status, elapsed_s, started.session_dir), flush=True)
            return await _until_stopped(stopping, router, progress)
    finally:
        stopping.cancel()


async def _until_stopped(
    stopping: asyncio.Task[None], router: subprocess.Popen[bytes], progress: Progress
) -> int:
    """0 on a stop signal; 1 (said on stderr) should the router exit first."""
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


@contextlib.asynccontextmanager
async def _running_control_plane(
    config: OrchestratorConfig, endpoints: Endpoints, sd_port: int | None, progress: Progress
) -> AsyncIterator[ControlPlane]:
    """The registry, the pool reconciler (placing the replicas) and the gRPC service."""
    control_plane = ControlPlane(config, port=config.control_plane.grpc_port, sd_port=sd_port)
    try:
        progress("starting the control plane (registry, pool reconciler, gRPC)")
        await control_plane.start()
        progress(f"control plane on {endpoints.control_plane}; placing replicas")
        yield control_plane
    finally:
        progress("stopping the control plane and its replicas")
        await control_plane.stop(remove_registry=True)


@contextlib.asynccontextmanager
async def _running_fabric(
    config: OrchestratorConfig, endpoints: Endpoints, progress: Progress
) -> AsyncIterator[EmbeddedFabric]:
    """Per simulated node a sysfs tree, an exporter over it and a health reporter."""
    fabric = EmbeddedFabric(
        default_fabric_root(endpoints.control_plane),
        control_plane=endpoints.control_plane,
        spec=config.fabric_health,
        host=endpoints.host,
        first_port=config.exporters.port,
    )
    try:
        progress("starting the simulated fabric: per node a sysfs tree, exporter, health reporter")
        try:
            await fabric.start()
        except FabricStartFailed as error:
            raise StartupFailed(f"the simulated fabric did not start: {error}") from None
        yield fabric
    finally:
        progress("stopping the simulated fabric")
        await fabric.stop()


@contextlib.asynccontextmanager
async def _running_prometheus(
    request: PrometheusRequest,
    config: OrchestratorConfig,
    endpoints: Endpoints,
    control_plane: ControlPlane,
    fabric: EmbeddedFabric,
    progress: Progress,
) -> AsyncIterator[LocalPrometheus]:
    """A local Prometheus with the shipped rules, over the router, engines and exporters."""
    progress("starting Prometheus: the shipped rules over the router, engines, exporters")
    try:
        prometheus = await start_prometheus(
            request,
            router=f"127.0.0.1:{endpoints.metrics_port}",
            control_plane=control_plane,
            fabric=fabric,
            latency_scale=config.router.latency_scale or 1.0,
        )
    except PrometheusError as error:
        raise StartupFailed(f"Prometheus did not start: {error}") from None
    try:
        yield prometheus
    finally:
        progress("stopping Prometheus")
        prometheus.stop()
