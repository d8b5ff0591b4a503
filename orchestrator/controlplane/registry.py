"""The `Registry` Ray actor: the control plane's source of truth, a thin async wrapper.

All bookkeeping lives in `RegistryState`. The actor adds what only a process can: one instance per
cluster (named, detached, restarted by Ray whenever it dies), a clock, and a long poll for watchers.
A restarted registry starts with no replicas, at a version above any it handed out (wall-clock
milliseconds), and is rebuilt as replica actors re-register when their heartbeat says it forgot
them; watchers get no table until it is (so routers never see the half-empty one in between).
The desired sizes set by `scale` and `drain` cannot be rebuilt that way, so they are kept in
the Ray cluster's GCS key-value store (the store Ray Serve keeps its controller's checkpoints in),
which outlives any actor. They are kept with a digest of the config they were set against: a
registry started with a different config starts from that config's sizes instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from typing import Any, Final, TypeVar

import ray
from ray.experimental import internal_kv
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from orchestrator.config.schema import OrchestratorConfig
from orchestrator.controlplane.registry_records import (
    HeartbeatReply,
    RegistryStatus,
    ReplicaRegistration,
)
from orchestrator.controlplane.registry_state import (
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    RegistryState,
    default_estimator,
)
from orchestrator.core.records import NodeHealth, ReplicaLoad
from orchestrator.table.snapshot import LoadDelta, RoutingTable

REGISTRY_NAME: Final = "orchestrator-registry"
NAMESPACE: Final = "orchestrator"
# How often a long poll re-checks heartbeats while it waits: stale replicas turn unhealthy within
# `heartbeat_timeout_s` plus this.
_EXPIRY_CHECK_S: Final = 0.5
# How long a watcher's load delta gathers heartbeats once one arrived: at 512 replicas beating
# once a second, one delta carries about fifty reports instead of one each.
LOAD_BATCH_S: Final = 0.1

_T = TypeVar("_T")
_KV_NAMESPACE: Final = b"orchestrator"
_HEAD_RESOURCE: Final = "node:__internal_head__"


class Registry:
    """Ray actor class (see `start_registry`); methods are async so long polls do not block."""

    def __init__(
        self,
        config: OrchestratorConfig,
        heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S,
        sizes_key: str = REGISTRY_NAME,
    ) -> None:
        self._sizes_key = f"desired-sizes/{sizes_key}".encode()
        self._config_digest = hashlib.sha256(config.model_dump_json().encode()).hexdigest()
        self._state = RegistryState(
            config,
            now_s=time.monotonic,
            first_version=time.time_ns() // 1_000_000,
            heartbeat_timeout_s=heartbeat_timeout_s,
            sizes=self._saved_sizes(),
            rebuild_s=heartbeat_timeout_s if _restarted() else 0.0,
            estimator=default_estimator(config.router.latency_scale or 1.0),
        )
        self._changed: asyncio.Event | None = None

    async def register_replica(self, registration: ReplicaRegistration) -> int:
        return self._after(self._state.register(registration))

    async def deregister_replica(self, replica_id: str) -> bool:
        return self._after(self._state.deregister(replica_id))

    async def heartbeat(
        self, replica_id: str, load: ReplicaLoad | None, problem: str = "", age_s: float = 0.0
    ) -> HeartbeatReply:
        """`age_s`: how long before sending the sender read the load (on its own clock), so the
        load's age counts from the scrape, not from here."""
        self._expire()
        return self._after(self._state.heartbeat(replica_id, load, problem, age_s))

    async def heartbeat_many(
        self, beats: list[tuple[str, ReplicaLoad | None, str, float]]
    ) -> list[HeartbeatReply]:
        """`heartbeat` for each (replica id, load, problem, age), in one call: a checker of many
        replicas reports what it read since its last call at once."""
        self._expire()
        return self._after([self._state.heartbeat(*beat) for beat in beats])

    async def report_node_health(self, node: str, health: NodeHealth) -> None:
        self._state.report_node_health(node, health)
        self._notify()

    async def report_unplaceable(self, reasons: dict[str, str]) -> None:
        self._state.report_unplaceable(reasons)

    async def drain(self, target: str) -> tuple[str, ...]:
        drained = self._state.drain(target)
        self._save_sizes()
        return self._after(drained)

    async def scale(self, pool: str, replicas: int) -> None:
        self._state.scale(pool, replicas)
        self._save_sizes()
        self._notify()

    async def snapshot(self) -> RoutingTable:
        self._expire()
        return self._state.table()

    async def status(self) -> RegistryStatus:
        self._expire()
        return self._state.status()

    async def wait_for_change(
        self, after: int, after_load: int, timeout_s: float
    ) -> RoutingTable | LoadDelta:
        """The whole table once its version exceeds `after`; else the load reports newer than
        `after_load`, gathered for `LOAD_BATCH_S` after the first; else, after `timeout_s`, an empty
        delta (the watch's keep-alive). Like `wait_for_version`, nothing before a restarted
        registry is rebuilt."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._expire()
            rebuilt = self._state.rebuilt()
            if rebuilt and self._state.version > after:
                return self._state.table()
            if rebuilt and self._state.load_version > after_load:
                await asyncio.sleep(LOAD_BATCH_S)
                if self._state.version > after:
                    return self._state.table()
                return self._state.loads_since(after_load)
            left = deadline - time.monotonic()
            if rebuilt and left <= 0:
                return self._state.loads_since(after_load)
            changed = self._event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), max(min(left, _EXPIRY_CHECK_S), 0.05))

    async def wait_for_version(self, after: int, timeout_s: float) -> RoutingTable:
        """The table once its version exceeds `after`, or the current one after `timeout_s`.

        A restarted registry answers only once rebuilt (`RegistryState.rebuilt`, at most a
        heartbeat timeout after the restart), so no watcher gets a table missing live replicas.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            self._expire()
            rebuilt = self._state.rebuilt()
            left = deadline - time.monotonic()
            if rebuilt and (self._state.version > after or left <= 0):
                return self._state.table()
            changed = self._event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), max(min(left, _EXPIRY_CHECK_S), 0.05))

    def _saved_sizes(self) -> dict[str, int] | None:
        saved = internal_kv._internal_kv_get(self._sizes_key, namespace=_KV_NAMESPACE)
        if not saved:
            return None
        entry = json.loads(saved)
        return dict(entry["sizes"]) if entry.get("config") == self._config_digest else None

    def _save_sizes(self) -> None:
        entry = {"config": self._config_digest, "sizes": self._state.sizes()}
        internal_kv._internal_kv_put(
            self._sizes_key, json.dumps(entry).encode(), overwrite=True, namespace=_KV_NAMESPACE
        )

    def _expire(self) -> None:
        if self._state.expire():
            self._notify()

    def _after(self, result: _T) -> _T:
        """Wake watchers after a call that may have changed the state; returns its result."""
        self._notify()
        return result

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        if changed is not None:
            changed.set()


RegistryActor = ray.remote(Registry)


def start_registry(
    config: OrchestratorConfig,
    *,
    name: str = REGISTRY_NAME,
    namespace: str = NAMESPACE,
    heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S,
    node_id: str | None = None,
) -> Any:
    """The cluster's registry handle, started if absent (named, detached, always restarted).

    It asks for no CPU and is pinned to `node_id`, by default the head node: a GPU node can die
    with its replicas, and the registry must outlive them, while the head holds the cluster's GCS,
    without which there is no cluster anyway. The pin is hard because Ray's soft node affinity
    does not hold for a zero-CPU actor (seen placing it on a GPU node, which then took it along).
    """
    home = node_id or _head_node_id()
    return RegistryActor.options(
        name=name,
        namespace=namespace,
        lifetime="detached",
        max_restarts=-1,
        max_task_retries=-1,
        num_cpus=0,
        get_if_exists=True,
        scheduling_strategy=NodeAffinitySchedulingStrategy(home, soft=False),
    ).remote(config, heartbeat_timeout_s, f"{namespace}/{name}")


def _restarted() -> bool:
    """Whether this registry actor is a restart (Ray counts them), so it must rebuild its table."""
    return bool(ray.get_runtime_context().was_current_actor_reconstructed)


def _head_node_id() -> str:
    """The live head node's id (Ray marks it with a `node:__internal_head__` resource); the
    caller's node when there is none."""
    for node in ray.nodes():
        if node.get("Alive") and _HEAD_RESOURCE in (node.get("Resources") or {}):
            return str(node["NodeID"])
    return str(ray.get_runtime_context().get_node_id())
