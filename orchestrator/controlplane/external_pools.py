"""External pools: endpoints that run elsewhere, health-checked and heartbeated on their behalf.

An external replica has no actor to register it, so the control plane does what a `ReplicaActor`
does for its engine: once the endpoint answers `/health` it is registered, and each check that
passes is a heartbeat carrying the load from its `/metrics`. A check that fails sends nothing, so
the registry lists the replica `unhealthy` after `heartbeat_timeout_s`, as it would a silent
actor; it is ready again on the next check that passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Final

import aiohttp

from orchestrator.config.schema import OrchestratorConfig, PoolSpec
from orchestrator.controlplane.registry_state import ReplicaRegistration
from orchestrator.core.records import EngineKind, ReplicaLoad
from orchestrator.engines import adapter_for

log = logging.getLogger(__name__)

DEFAULT_CHECK_INTERVAL_S: Final = 1.0
_CHECK_TIMEOUT_S: Final = 2.0
_ADAPTER: Final = adapter_for(EngineKind.EXTERNAL)


def external_registrations(config: OrchestratorConfig) -> list[ReplicaRegistration]:
    """One registration per endpoint of each external pool; ids are `<pool>-<index>`."""
    return [
        _registration(pool, index, url)
        for pool in config.pools
        if pool.engine is EngineKind.EXTERNAL
        for index, url in enumerate(pool.endpoints)
    ]


def _registration(pool: PoolSpec, index: int, url: str) -> ReplicaRegistration:
    return ReplicaRegistration(
        replica_id=f"{pool.name}-{index}",
        url=url,
        pool=pool.name,
        site=pool.site,
        generation=pool.generation,
        engine=EngineKind.EXTERNAL,
    )


class ExternalReplicaChecker:
    """Checks every configured external endpoint each `interval_s`, all at once."""

    def __init__(
        self,
        config: OrchestratorConfig,
        registry: Any,
        *,
        interval_s: float = DEFAULT_CHECK_INTERVAL_S,
    ) -> None:
        self._registrations = external_registrations(config)
        self._registry = registry
        self._interval_s = interval_s

    async def run(self) -> None:
        """Check until cancelled."""
        timeout = aiohttp.ClientTimeout(total=_CHECK_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                await asyncio.gather(*(self._check(session, r) for r in self._registrations))
                await asyncio.sleep(self._interval_s)

    async def _check(
        self, session: aiohttp.ClientSession, registration: ReplicaRegistration
    ) -> None:
        try:
            load = await _probe(session, registration.url)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.debug("external replica %s failed its check: %s", registration.replica_id, exc)
            return
        try:
            reply = await self._registry.heartbeat.remote(registration.replica_id, load)
            if not reply.known:
                await self._registry.register_replica.remote(registration)
        except Exception as exc:  # the registry restarting: the next check registers again
            log.warning("could not report %s: %s", registration.replica_id, exc)


async def _probe(session: aiohttp.ClientSession, url: str) -> ReplicaLoad:
    """Raises unless `/health` answers 200; the load is idle when `/metrics` cannot be read."""
    async with session.get(url + _ADAPTER.health_path) as health:
        health.raise_for_status()
    with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
        async with session.get(url + "/metrics") as metrics:
            metrics.raise_for_status()
            return _ADAPTER.parse_load(await metrics.text(), time.time())
    return ReplicaLoad(running=0, waiting=0, kv_cache_usage=0.0, observed_at_s=time.time())
