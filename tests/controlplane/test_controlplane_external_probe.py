"""What one round of external checks reports, against real HTTP servers on loopback: a replica
whose `/health` answers 200 heartbeats with its load, or with no load and the reason when its
`/metrics` page cannot be read (unknown, never idle); one whose `/health` fails, or that refuses
the connection, sends nothing. A replica the registry does not know is registered with the version
its engine states. (The registry here records the calls; the Ray registry's side of them is
tested in `test_controlplane_ray_registry_actor.py`.)"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from orchestrator.bench.vllm_page import vllm_metrics_page
from orchestrator.config import OrchestratorConfig, validate_config
from orchestrator.controlplane.external_pools import ExternalReplicaChecker
from orchestrator.controlplane.registry_records import HeartbeatReply, ReplicaRegistration
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, ReplicaLoad
from orchestrator.engines.metrics import MAX_PAGE_BYTES
from orchestrator.forwarding.upstream import UpstreamPool

GOOD_PAGE = vllm_metrics_page()


def app_for(health: int, metrics: int | None, page: bytes = GOOD_PAGE) -> web.Application:
    """A replica whose `/health` answers `health`; `/metrics` answers `metrics` with `page`
    (None: a page over the cap)."""

    async def health_handler(_: web.Request) -> web.Response:
        return web.Response(status=health, text="ok" if health == 200 else "engine dead")

    async def metrics_handler(_: web.Request) -> web.StreamResponse:
        if metrics is None:
            return web.Response(body=b"# x\n" * (MAX_PAGE_BYTES // 4 + 1))
        return web.Response(status=metrics, body=page, content_type="text/plain")

    async def version_handler(_: web.Request) -> web.Response:
        return web.json_response({"version": "0.11.2"})

    app = web.Application()
    app.router.add_get("/health", health_handler)
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/version", version_handler)
    return app


class _Call:
    """What `actor.method.remote(...)` gives: awaitable, as a Ray object ref is."""

    def __init__(self, method: Any) -> None:
        self._method = method

    def remote(self, *args: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.set_result(self._method(*args))
        return future


class RecordingRegistry:
    """Knows the replicas `known` names; records heartbeats and registrations."""

    def __init__(self, known: set[str]) -> None:
        self.known = known
        self.beats: dict[str, tuple[ReplicaLoad | None, str]] = {}
        self.registered: dict[str, str] = {}  # id: engine version
        self.heartbeat_many = _Call(self._heartbeat_many)
        self.register_replica = _Call(self._register)

    def _heartbeat_many(
        self, beats: list[tuple[str, ReplicaLoad | None, str, float]]
    ) -> list[HeartbeatReply]:
        for replica_id, load, problem, _ in beats:
            self.beats[replica_id] = (load, problem)
        return [HeartbeatReply(known=replica_id in self.known) for replica_id, *_ in beats]

    def _register(self, registration: Any) -> None:
        self.registered[registration.replica_id] = registration.engine_version
        self.known.add(registration.replica_id)


@contextlib.asynccontextmanager
async def serving(apps: list[web.Application]) -> AsyncIterator[list[str]]:
    runners = []
    urls = []
    try:
        for app in apps:
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            runners.append(runner)
            port = runner.addresses[0][1]
            urls.append(f"http://127.0.0.1:{port}")
        yield urls
    finally:
        for runner in runners:
            await runner.cleanup()


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def config_for(endpoints: list[str]) -> OrchestratorConfig:
    return validate_config(
        {
            "apiVersion": "orchestrator/v1alpha1",
            "kind": "Orchestrator",
            "sites": {"lab": {}},
            "pools": [
                {
                    "name": "lab",
                    "site": "lab",
                    "generation": "MI355X",
                    "engine": "external",
                    "endpoints": endpoints,
                }
            ],
        }
    )


def test_one_round_reports_loads_unreadable_pages_and_nothing_for_failed_checks() -> None:
    apps = [
        app_for(200, 200),  # lab-0: healthy, page read
        app_for(200, 404),  # lab-1: healthy, page missing
        app_for(200, None),  # lab-2: healthy, page over the cap
        app_for(503, 200),  # lab-3: health check fails
        app_for(200, 200, b"<html>not a metrics page</html>"),  # lab-4: page unreadable
    ]

    async def run() -> RecordingRegistry:
        async with serving(apps) as urls:
            config = config_for([*urls, closed_port_url()])  # lab-5: refuses the connection
            registry = RecordingRegistry(known={"lab-1", "lab-2", "lab-4"})
            checker = ExternalReplicaChecker(
                config, registry, interval_s=0.2, include_registered=False
            )
            task = asyncio.create_task(checker.run())
            await asyncio.sleep(1.0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return registry

    registry = asyncio.run(run())
    assert set(registry.beats) == {"lab-0", "lab-1", "lab-2", "lab-4"}
    load, problem = registry.beats["lab-0"]
    assert load is not None and problem == ""
    for replica_id, reason in (("lab-1", "404"), ("lab-2", "over"), ("lab-4", "Prometheus")):
        load, problem = registry.beats[replica_id]
        assert load is None, replica_id  # unknown, not idle
        assert problem.startswith("/metrics:") and reason in problem, (replica_id, problem)
    # the one the registry did not know was registered, with the version its engine states
    assert registry.registered == {"lab-0": "0.11.2"}


def test_a_registered_url_no_connection_can_be_made_to_fails_its_check_and_nothing_else() -> None:
    """`RegisterReplica` takes URLs the config would refuse; one whose host cannot be encoded
    fails its own check instead of ending the round (and every check after it)."""
    bad = ReplicaRegistration(
        replica_id="grpc-0",
        url="http://a..b:8000",
        pool="grpc",
        site="lab",
        generation=Generation.MI355X,
        engine=EngineKind.EXTERNAL,
        external=True,
    )
    config = config_for(["http://127.0.0.1:9"])  # configured, but not this checker's share

    async def check() -> object:
        checker = ExternalReplicaChecker(config, RecordingRegistry(set()), include_configured=False)
        pool = UpstreamPool()
        await pool.start()
        try:
            return await checker._check(pool, bad)
        finally:
            await pool.close()

    assert asyncio.run(check()) is None
