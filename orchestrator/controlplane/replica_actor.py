"""`ReplicaActor`: one engine on one Ray node, registered with the `Registry` and heartbeating load.

A real engine runs on the GPUs Ray assigned this actor (placement.py asks for them), never on the
pool's placeholder list: several replicas on one 8-GPU node each get GPUs of their own.

Its life: start the engine, wait until `/health` answers, register the endpoint with the version the
engine states, then once a second
scrape the engine's `/metrics` (read through the engine adapter) and heartbeat the load: this is
the one scrape of the engine, and the load reaches routers in the routing table. A page the
adapter cannot read (a metric renamed or missing) still heartbeats, with no load and the
adapter's error, so the replica stays listed with its load unknown. When a
heartbeat says the registry forgot it (the registry restarted), it registers again, draining again
if it was: that is how a restarted registry is rebuilt. A registry that does not answer is retried
on the next beat, so a replica keeps serving through a control-plane restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import replace
from typing import Any, Final

import aiohttp
import ray

from orchestrator.controlplane.engine_version import read_engine_version
from orchestrator.controlplane.metrics_page import read_age_s, read_page
from orchestrator.controlplane.placement import runs_on_gpus
from orchestrator.controlplane.reconcile import ObservedState
from orchestrator.controlplane.registry_records import ReplicaRegistration
from orchestrator.controlplane.replica_engine import (
    EngineSpec,
    LaunchPlan,
    RunningEngine,
    SubprocessEngine,
    engine_for,
)
from orchestrator.core.records import ReplicaLoad
from orchestrator.engines import adapter_for

log = logging.getLogger(__name__)

DEFAULT_HEARTBEAT_S: Final = 1.0
DEFAULT_READY_TIMEOUT_S: Final = 600.0  # a real engine loads 120B parameters before it answers
_HEALTH_POLL_S: Final = 0.2
_HTTP_TIMEOUT_S: Final = 2.0


class ReplicaActor:
    """Ray actor class (async, placed by `PoolReconciler`); `registration` lacks url and node."""

    def __init__(
        self,
        registration: ReplicaRegistration,
        engine: EngineSpec,
        registry: Any,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
    ) -> None:
        self._registration = registration
        # An empty host means this node's address, known only once the actor runs on it.
        self._spec = replace(
            engine,
            host=engine.host or ray.util.get_node_ip_address(),
            gpu_indices=assigned_gpus() or engine.gpu_indices,
        )
        self._registry = registry
        self._heartbeat_s = heartbeat_s
        self._ready_timeout_s = ready_timeout_s
        self._adapter = adapter_for(engine.engine)
        self._engine: RunningEngine | None = None
        self._session: aiohttp.ClientSession | None = None
        self._beating: asyncio.Task[None] | None = None
        self._started: asyncio.Task[str] | None = None
        self._draining = False

    async def start(self) -> str:
        """Start, wait for health, register; returns the endpoint. Calling it again waits too."""
        if self._started is None:
            self._started = asyncio.create_task(self._start())
        return await asyncio.shield(self._started)

    async def registration(self) -> ReplicaRegistration:
        return self._registration

    async def launch_plan(self, port: int) -> LaunchPlan | None:
        """The argv and whole environment a real engine is (or would be) started with here;
        `None` for the simulator, which runs in this actor's own loop and holds no GPU."""
        if not runs_on_gpus(self._spec.engine):
            return None
        return SubprocessEngine(self._spec).plan(port)

    async def gpu_ids(self) -> tuple[int, ...]:
        """The GPU ids Ray assigned this actor (none for a simulated replica)."""
        return assigned_gpus()

    async def stop(self) -> None:
        """Stop heartbeating, deregister (best effort) and stop the engine."""
        if self._beating is not None:
            self._beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beating
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                self._registry.deregister_replica.remote(self._registration.replica_id),
                _HTTP_TIMEOUT_S,
            )
        if self._engine is not None:
            await self._engine.stop()
        if self._session is not None:
            await self._session.close()

    async def _start(self) -> str:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=_HTTP_TIMEOUT_S))
        self._engine = engine_for(self._spec)
        url = await self._engine.start()
        await self._wait_healthy(url)
        self._registration = replace(
            self._registration,
            url=url,
            node=ray.get_runtime_context().get_node_id(),
            engine_version=await read_engine_version(self._session, url, self._adapter),
        )
        await self._registry.register_replica.remote(self._registration)
        self._beating = asyncio.create_task(self._heartbeat_forever())
        return url

    async def _wait_healthy(self, url: str) -> None:
        assert self._session is not None and self._engine is not None
        deadline = time.monotonic() + self._ready_timeout_s
        while True:
            exit_code = self._engine.exit_code()
            if exit_code is not None:
                raise RuntimeError(f"engine for {url} exited with code {exit_code} before healthy")
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with self._session.get(url + self._adapter.health_path) as response:
                    if response.status == 200:
                        return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"engine at {url} did not answer {self._adapter.health_path} within"
                    f" {self._ready_timeout_s:g} s"
                )
            await asyncio.sleep(_HEALTH_POLL_S)

    async def _heartbeat_forever(self) -> None:
        """One heartbeat per `heartbeat_s`, counted from the start of the last (so the load's age
        stays within one interval whatever a scrape takes)."""
        started = time.monotonic()
        while True:
            await asyncio.sleep(max(0.0, started + self._heartbeat_s - time.monotonic()))
            started = time.monotonic()
            try:
                await self._heartbeat()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the registry restarting, or the engine not answering
                log.warning("heartbeat of %s failed: %s", self._registration.replica_id, exc)

    async def _heartbeat(self) -> None:
        load: ReplicaLoad | None = None
        problem = ""
        read_at_s = time.monotonic()
        try:
            page = await self._scrape()
            read_at_s = time.monotonic()
            load = self._adapter.parse_load(page, time.time())
        except ValueError as exc:
            problem = str(exc)
        reply = await asyncio.wait_for(
            self._registry.heartbeat.remote(
                self._registration.replica_id, load, problem, read_age_s(load, read_at_s)
            ),
            self._heartbeat_s * 5,
        )
        if reply.known:
            self._draining = reply.state is not ObservedState.READY
            return
        timeout_s = self._heartbeat_s * 5
        await asyncio.wait_for(
            self._registry.register_replica.remote(self._registration), timeout_s
        )
        if self._draining:
            await asyncio.wait_for(
                self._registry.drain.remote(self._registration.replica_id), timeout_s
            )

    async def _scrape(self) -> str:
        """The engine's `/metrics` page; raises when it does not answer 200 (no heartbeat then),
        `MalformedMetricsPageError` when it is too large (a heartbeat saying so)."""
        assert self._session is not None
        async with self._session.get(self._registration.url + "/metrics") as response:
            response.raise_for_status()
            return await read_page(response)


def assigned_gpus() -> tuple[int, ...]:
    """The node ordinals of the GPUs Ray assigned the calling actor; empty when it holds none."""
    ids = ray.get_runtime_context().get_accelerator_ids().get("GPU", [])
    try:
        return tuple(sorted(int(i) for i in ids))
    except ValueError:
        raise RuntimeError(
            f"Ray assigned GPU ids {ids}, not ordinals: start the Ray node with"
            " HIP_VISIBLE_DEVICES naming GPUs by index (or unset)"
        ) from None


ReplicaActorClass = ray.remote(ReplicaActor)
