"""External pools found by Kubernetes labels: their ready pods become their replicas.

A pool with `engine: external` and a `selector` has no fixed endpoints: a `PodWatch` per pool
follows the pods of the control plane's namespace that match it, and each change of the ready set
registers the pods that joined (as external replicas, which `ExternalReplicaChecker` then health-
checks and heartbeats) and deregisters those that left or turned unready, so the routing table
follows the pods within a watch event. Every `resync_s` the registry is asked which of them it
still knows, and those it lost (a restarted registry) are registered again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

from orchestrator.config.schema import DISCOVERED_PORT, OrchestratorConfig, PoolSpec
from orchestrator.controlplane.registry_records import RegistryStatus, ReplicaRegistration
from orchestrator.core.records import EngineKind
from orchestrator.discovery import PodEndpoint, PodWatch, kubernetes_api, own_namespace

log = logging.getLogger(__name__)

DEFAULT_RESYNC_S: Final = 5.0
_REGISTRY_TIMEOUT_S: Final = 10.0
_JOIN_TIMEOUT_S: Final = 10.0

Change = tuple[PoolSpec, Mapping[str, PodEndpoint]]


def discovered_pools(config: OrchestratorConfig) -> tuple[PoolSpec, ...]:
    """The external pools whose replicas come from Kubernetes (those with a selector)."""
    return tuple(
        pool
        for pool in config.pools
        if pool.engine is EngineKind.EXTERNAL and pool.selector is not None
    )


def pod_registration(pool: PoolSpec, endpoint: PodEndpoint) -> ReplicaRegistration:
    """A ready pod as a replica of `pool`; its id is `<pool>-<pod name>`."""
    return ReplicaRegistration(
        replica_id=f"{pool.name}-{endpoint.name}",
        url=endpoint.url,
        pool=pool.name,
        site=pool.site,
        generation=pool.generation,
        engine=EngineKind.EXTERNAL,
        external=True,
    )


class KubernetesPools:
    """Keeps the registry's replicas of the discovered pools equal to their ready pods.

    `api_factory` builds the `CoreV1Api` (in-cluster by default; tests point one at a local
    server); `namespace` defaults to the control plane's own.
    """

    def __init__(
        self,
        config: OrchestratorConfig,
        registry: Any,
        *,
        api_factory: Callable[[], Any] = kubernetes_api,
        namespace: str | None = None,
        resync_s: float = DEFAULT_RESYNC_S,
    ) -> None:
        self._pools = discovered_pools(config)
        self._registry = registry
        self._api_factory = api_factory
        self._namespace = namespace
        self._resync_s = resync_s
        self._desired: dict[str, dict[str, ReplicaRegistration]] = {}

    async def run(self) -> None:
        """Watch every discovered pool until cancelled; returns at once when there are none."""
        if not self._pools:
            return
        loop = asyncio.get_running_loop()
        changes: asyncio.Queue[Change] = asyncio.Queue()
        try:
            api = await asyncio.to_thread(self._api_factory)
        except Exception as exc:  # no service account and no kubeconfig: say so, keep serving
            names = ", ".join(pool.name for pool in self._pools)
            log.error("cannot reach the Kubernetes API (%s); pools %s stay empty", exc, names)
            return
        namespace = self._namespace or own_namespace()
        watches: list[tuple[PodWatch, threading.Thread]] = []
        try:
            for pool in self._pools:

                def publish(endpoints: Mapping[str, PodEndpoint], pool: PoolSpec = pool) -> None:
                    loop.call_soon_threadsafe(changes.put_nowait, (pool, endpoints))

                pod_watch = PodWatch(
                    api,
                    namespace=namespace,
                    selector=pool.selector or {},
                    port=pool.port or DISCOVERED_PORT,
                    on_change=publish,
                )
                thread = threading.Thread(
                    target=pod_watch.run, name=f"pod-watch-{pool.name}", daemon=True
                )
                thread.start()
                watches.append((pod_watch, thread))
            while True:
                try:
                    pool, endpoints = await asyncio.wait_for(changes.get(), self._resync_s)
                except TimeoutError:
                    await self._resync()
                else:
                    await self._apply(pool, endpoints)
        finally:
            for pod_watch, _ in watches:
                pod_watch.stop()
            for _, thread in watches:
                await asyncio.to_thread(thread.join, _JOIN_TIMEOUT_S)

    async def _apply(self, pool: PoolSpec, endpoints: Mapping[str, PodEndpoint]) -> None:
        desired = {
            registration.replica_id: registration
            for registration in (pod_registration(pool, e) for e in endpoints.values())
        }
        held = self._desired.get(pool.name, {})
        self._desired[pool.name] = desired
        for replica_id in held.keys() - desired.keys():
            log.info("pool %s: pod replica %s left", pool.name, replica_id)
            await self._call(self._registry.deregister_replica.remote(replica_id), replica_id)
        for replica_id, registration in desired.items():
            if held.get(replica_id) != registration:
                log.info("pool %s: pod replica %s at %s", pool.name, replica_id, registration.url)
                await self._call(self._registry.register_replica.remote(registration), replica_id)

    async def _resync(self) -> None:
        try:
            status: RegistryStatus = await asyncio.wait_for(
                self._registry.status.remote(), _REGISTRY_TIMEOUT_S
            )
        except Exception as exc:  # the registry restarting: try again next time
            log.debug("could not list the registry for a resync: %s", exc)
            return
        known = {entry.record.registration.replica_id for entry in status.replicas}
        for desired in self._desired.values():
            for replica_id, registration in desired.items():
                if replica_id not in known:
                    await self._call(
                        self._registry.register_replica.remote(registration), replica_id
                    )

    async def _call(self, pending: Any, replica_id: str) -> None:
        """Await a registry call; a failure is logged and left to the next resync."""
        try:
            await asyncio.wait_for(pending, _REGISTRY_TIMEOUT_S)
        except Exception as exc:
            log.warning("could not update the registry for %s: %s", replica_id, exc)
