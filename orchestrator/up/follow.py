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
from orchestrator.frontends.http.app import HttpSettings
from orchestrator.frontends.http.server import Companion, serve_until_stopped, use_uvloop
from orchestrator.router_service import RouterService, RouterSettings, profile_named
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


def serve_following(
    target: str,
    *,
    profile: str,
    settings: RouterSettings,
    http: HttpSettings,
    host: str,
    port: int,
    companions: Sequence[Companion] = (),
    tls: TlsFiles | None = None,
    control_plane_tls: TlsFiles | None = None,
) -> int:
    """Serve one router process following `target` until SIGINT or SIGTERM; returns 0.

    The profile is resolved first, so a bad name fails before anything listens.
    """
    chosen = profile_named(profile)
    use_uvloop()

    def announce(bound: int) -> None:
        print(
            f"orchestrator router on {'http' if tls is None else 'https'}://{host}:{bound}, "
            f"following the control plane at "
            f"{target}",
            file=sys.stderr,
            flush=True,
        )

    async def main() -> None:
        service = RouterService(TableHolder(), chosen, settings=settings, scrape_replicas=False)
        await serve_until_stopped(
            service,
            http,
            host,
            port,
            on_listening=announce,
            companions=[
                partial(following_control_plane, target=target, tls=control_plane_tls),
                *companions,
            ],
            tls=tls,
        )

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    return 0
