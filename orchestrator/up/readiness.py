"""Waiting for the embedded stack: every launched pool at size and the router routing to all."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from orchestrator.config.schema import OrchestratorConfig
from orchestrator.controlplane.admin_client import (
    ControlPlaneClient,
    ControlPlaneUnreachable,
    Status,
)
from orchestrator.controlplane.control_plane import ControlPlane
from orchestrator.up.banner import Endpoints

STARTUP_TIMEOUT_S: Final = 300.0
_POLL_S: Final = 0.5

T = TypeVar("T")


class StartupFailed(Exception):
    """Something `up` started did not come up; the message says what and why."""


async def first(stopping: asyncio.Task[None], work: Awaitable[T]) -> T | None:
    """`work`'s result, or None when a signal comes first (then `work` is cancelled)."""
    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait({stopping, task}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return None


async def until_ready(
    config: OrchestratorConfig,
    endpoints: Endpoints,
    control_plane: ControlPlane,
    router: subprocess.Popen[bytes],
    progress: Callable[[str], None],
) -> Status:
    """Wait until every launched pool has its replicas ready and the router routes to them all;
    `StartupFailed` when the router exits or `STARTUP_TIMEOUT_S` passes first."""
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
