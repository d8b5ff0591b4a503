"""`orchestrator control-plane`: the control plane as a process of its own, until a stop signal.

The Helm chart's control-plane pod runs it against the chart's Ray head; without `--ray-address`
it starts a local Ray cluster (stopped whole on exit). Progress goes to stderr, where it listens
to stdout.
"""

from __future__ import annotations

import asyncio
import sys

from orchestrator.config.schema import OrchestratorConfig
from orchestrator.controlplane.control_plane import ControlPlane
from orchestrator.controlplane.lifetime import Progress, ray_session, until_stop_signal
from orchestrator.security.files import TlsFiles


def print_progress(line: str) -> None:
    print(f"orchestrator control-plane: {line}", file=sys.stderr, flush=True)


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
    if ray_address is None:
        progress("starting a local Ray cluster")
    else:
        progress(f"connecting to the Ray cluster at {ray_address}")
    control_plane = ControlPlane(
        config,
        host=host,
        port=port,
        tls=tls,
        sd_port=sd_port,
        health_only_clients=health_only_clients,
    )
    try:
        with ray_session(config, ray_address=ray_address, progress=progress):
            asyncio.run(_serve(control_plane, host, remove_registry=ray_address is None))
    except KeyboardInterrupt:
        return 130
    return 0


async def _serve(control_plane: ControlPlane, host: str, *, remove_registry: bool) -> None:
    try:
        bound = await control_plane.start()
        print(f"orchestrator control plane on {host}:{bound}", flush=True)
        if control_plane.sd_url is not None:
            print(f"engines' service discovery on {control_plane.sd_url}", flush=True)
        await until_stop_signal()
    finally:
        await control_plane.stop(remove_registry=remove_registry)
