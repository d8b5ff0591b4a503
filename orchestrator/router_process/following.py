"""A router that follows the control plane's routing table instead of a replicas file.

`orchestrator router --control-plane ADDR` and the router `orchestrator up` starts: the table
starts empty and the router answers 503 on `/ready` until the first snapshot with a ready replica
arrives; while the control plane is unreachable it keeps serving from the last snapshot. It scrapes
no replica: their load arrives in the table (the control plane scrapes each engine once).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Sequence
from functools import partial

from orchestrator.controlplane.watch_client import follow_routing_table
from orchestrator.frontends.http.server import Companion, Listen, serve
from orchestrator.frontends.http.settings import HttpSettings
from orchestrator.router_service import RouterService, RouterSettings, profile_named
from orchestrator.router_settings import router_profile
from orchestrator.security.files import TlsFiles
from orchestrator.table.source import TableHolder


@contextlib.asynccontextmanager
async def following_control_plane(
    service: RouterService, *, target: str, tls: TlsFiles | None = None
) -> AsyncIterator[None]:
    """Feed `service.table` from the control plane at `target` while the router serves."""
    task = asyncio.create_task(
        follow_routing_table(
            target, service.table, tls=tls, loads=service, clock=service.clock.now
        ),
        name="table-watch",
    )
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def following_service(profile: str, settings: RouterSettings) -> RouterService:
    """A worker's router over an empty table, for `following_control_plane` to fill (load
    included: it scrapes no replica)."""
    return RouterService(
        TableHolder(), router_profile(profile), settings=settings, scrape_replicas=False
    )


def serve_following(
    target: str,
    *,
    profile: str,
    settings: RouterSettings,
    http: HttpSettings,
    listen: Listen,
    companions: Sequence[Companion] = (),
    control_plane_tls: TlsFiles | None = None,
    log_level: str = "INFO",
) -> int:
    """Serve `listen.workers` router processes, each following `target` on its own watch
    stream, until SIGINT or SIGTERM; returns the exit status of `serve`.

    The profile is resolved first, so a bad name fails before anything listens.
    """
    profile_named(profile)
    print(f"orchestrator router: following the control plane at {target}", file=sys.stderr,
          flush=True)  # fmt: skip
    return serve(
        partial(following_service, profile, settings),
        http,
        listen,
        log_level,
        companions=[
            partial(following_control_plane, target=target, tls=control_plane_tls),
            *companions,
        ],
    )
