"""A router worker serves its HTTP API and starts its companion servers (the gRPC frontend) on the
same `RouterService`, and stops them all cleanly."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
from replica_server import ReplicaThread
from router_harness import MODEL, ReplicaEntry, replicas_document

from orchestrator.frontends.http.server import serve_until_stopped
from orchestrator.frontends.http.settings import HttpSettings
from orchestrator.router_service import RouterService, profile_named
from orchestrator.table.source import TableHolder
from orchestrator.table.static_file import parse_replicas


def test_a_worker_serves_http_and_runs_its_companions_on_the_same_service(
    instant_pair: tuple[ReplicaThread, ReplicaThread],
) -> None:
    fast, _ = instant_pair
    table = parse_replicas(replicas_document([ReplicaEntry("a", fast.url)]))
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def companion(service: RouterService) -> AsyncIterator[None]:
        events.append(f"start with {len(service.table.snapshot().replicas)} replica")
        try:
            yield
        finally:
            events.append("stop")

    async def run() -> tuple[int, int]:
        service = RouterService(TableHolder(table), profile_named("capacity"))
        ports: asyncio.Queue[int] = asyncio.Queue()
        server = asyncio.create_task(
            serve_until_stopped(
                service,
                HttpSettings(),
                "127.0.0.1",
                0,
                on_listening=ports.put_nowait,
                companions=[companion],
            )
        )
        port = await asyncio.wait_for(ports.get(), 10)
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as client:
            health = (await client.get("/health")).status
            body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
            completion = (await client.post("/v1/completions", json=body)).status
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server
        return health, completion

    assert asyncio.run(run()) == (200, 200)
    assert events == ["start with 1 replica", "stop"]
