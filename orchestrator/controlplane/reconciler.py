"""`PoolReconciler`: the Ray effects of `reconcile` — observe, decide, act, once a second.

It observes the registry's desired pools and replicas, the replica actors it launched itself (a
launched replica counts as `starting` until it registers, and again while a restarted registry waits
for it to re-register, so a registry restart starts nothing extra), and Ray's node table. A replica
whose start failed, or whose heartbeats stopped for `lost_after_s` on a live node (its actor or
engine died), counts as `gone`, so it is stopped and replaced. External replicas (configured
endpoints, or registered over gRPC even with a node named) are never its to place or stop. When a
pool cannot be placed, it tells the registry why, for `GetStatus` and `orchestrator status`.
Decisions are `reconcile`'s alone; this class only carries them out.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import ray

from orchestrator.config.schema import PoolSpec
from orchestrator.controlplane.placement import node_infos, replica_options, runs_on_gpus
from orchestrator.controlplane.reconcile import (
    Action,
    DrainReplica,
    ForgetReplica,
    ObservedReplica,
    ObservedState,
    StartReplica,
    StopReplica,
    Unplaceable,
    reconcile,
)
from orchestrator.controlplane.registry import NAMESPACE
from orchestrator.controlplane.registry_records import (
    RegistryStatus,
    ReplicaRegistration,
    ReplicaStatus,
)
from orchestrator.controlplane.replica_actor import ReplicaActorClass
from orchestrator.controlplane.replica_engine import EngineSpec

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S: Final = 1.0
DEFAULT_LOST_AFTER_S: Final = 10.0
_CALL_TIMEOUT_S: Final = 10.0
_STOP_TIMEOUT_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class Launched:
    """A replica actor this reconciler created; `started` resolves once it has registered."""

    pool: str
    node: str
    gpus: int
    since_s: float
    handle: Any
    started: Any


class PoolReconciler:
    """Keeps every launched pool at its desired size on nodes of its site and generation.

    `uses_real_gpus` `None` (the default) asks Ray for GPUs for real engines only; see placement.py.
    """

    def __init__(
        self,
        registry: Any,
        *,
        model: str,
        namespace: str = NAMESPACE,
        list_nodes: Callable[[], Sequence[Mapping[str, Any]]] = ray.nodes,
        uses_real_gpus: bool | None = None,
        heartbeat_s: float = 1.0,
        lost_after_s: float = DEFAULT_LOST_AFTER_S,
    ) -> None:
        self._registry = registry
        self._model = model
        self._namespace = namespace
        self._list_nodes = list_nodes
        self._uses_real_gpus = uses_real_gpus
        self._heartbeat_s = heartbeat_s
        self._lost_after_s = lost_after_s
        self._launched: dict[str, Launched] = {}
        self.unplaceable: tuple[Unplaceable, ...] = ()

    def step(self) -> list[Action]:
        """One pass: observe, reconcile, act. Returns the actions it carried out."""
        status: RegistryStatus = ray.get(self._registry.status.remote(), timeout=_CALL_TIMEOUT_S)
        observed, taken = self._observe(status.replicas)
        listed = self._list_nodes()
        pools = {pool.name: pool for pool in status.pools}
        # Pools of real engines fit only where Ray has GPUs to give, simulated ones on GPU slots
        # too: each kind is reconciled against the nodes as it sees them, the simulated first,
        # whose placements then count as taken for the others.
        on_gpus = {pool.name for pool in status.pools if self._on_gpus(pool)}
        actions: list[Action] = []
        for real in (False, True):
            group = [pool for pool in status.pools if (pool.name in on_gpus) is real]
            seen = [replica for replica in observed if (replica.pool in on_gpus) is real]
            if group or seen:
                nodes = node_infos(listed, taken, real_gpus_only=real)
                decided = reconcile(group, seen, nodes)
                for action in decided:
                    if isinstance(action, StartReplica):
                        taken[action.node] += pools[action.pool].gpus_per_replica
                actions += decided
        for action in actions:
            self._act(action, pools)
        self.unplaceable = tuple(a for a in actions if isinstance(a, Unplaceable))
        reasons = {u.pool: u.reason for u in self.unplaceable}
        if reasons != dict(status.unplaceable):  # also after a restart, which forgot them
            ray.get(self._registry.report_unplaceable.remote(reasons), timeout=_CALL_TIMEOUT_S)
        return actions

    def _on_gpus(self, pool: PoolSpec) -> bool:
        """Whether `pool`'s replicas ask Ray for GPUs (the override, else its engine's kind)."""
        return runs_on_gpus(pool.engine) if self._uses_real_gpus is None else self._uses_real_gpus

    def run(self, stop: threading.Event, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        """Step every `interval_s` until `stop` is set; a failed pass is logged and retried."""
        while not stop.is_set():
            try:
                self.step()
            except Exception:
                log.exception("reconcile pass failed; retrying in %g s", interval_s)
            stop.wait(interval_s)

    def shutdown(self) -> None:
        """Stop every replica this reconciler launched (the registry forgets them)."""
        for replica_id in list(self._launched):
            self._stop(replica_id)

    def _observe(
        self, replicas: Sequence[ReplicaStatus]
    ) -> tuple[list[ObservedReplica], Counter[str]]:
        registered = {entry.record.replica_id: entry for entry in replicas}
        observed: dict[str, ObservedReplica] = {}
        taken: Counter[str] = Counter()
        for replica_id, launched in self._launched.items():
            entry = registered.get(replica_id)
            if entry is not None and entry.heartbeat_age_s > self._lost_after_s:
                state, since_s = ObservedState.GONE, entry.record.since_s
            elif entry is not None:
                state, since_s = entry.record.state, entry.record.since_s
            elif self._failed(launched):
                state, since_s = ObservedState.GONE, launched.since_s
            else:
                state, since_s = ObservedState.STARTING, launched.since_s
            observed[replica_id] = ObservedReplica(
                replica_id, launched.pool, launched.node, state, since_s
            )
            taken[launched.node] += launched.gpus
        for entry in replicas:
            record, reg = entry.record, entry.record.registration
            if record.replica_id not in observed and reg.node and not reg.external:
                observed[record.replica_id] = ObservedReplica(
                    record.replica_id, reg.pool, reg.node, record.state, record.since_s
                )
                taken[reg.node] += 1
        return list(observed.values()), taken

    @staticmethod
    def _failed(launched: Launched) -> bool:
        """Whether the replica's start ended in an error (its engine never became healthy)."""
        done, _ = ray.wait([launched.started], timeout=0)
        if not done:
            return False
        try:
            ray.get(launched.started)
        except Exception:
            return True
        return False

    def _act(self, action: Action, pools: Mapping[str, PoolSpec]) -> None:
        match action:
            case StartReplica(pool=pool_name, node=node):
                self._start(pools[pool_name], node)
            case DrainReplica(replica_id=replica_id):
                ray.get(self._registry.drain.remote(replica_id), timeout=_CALL_TIMEOUT_S)
            case StopReplica(replica_id=replica_id):
                self._stop(replica_id)
            case ForgetReplica(replica_id=replica_id):
                self._stop(replica_id, graceful=False)
            case Unplaceable(reason=reason):
                log.warning("%s", reason)

    def _start(self, pool: PoolSpec, node: str) -> None:
        replica_id = f"{pool.name}-{uuid.uuid4().hex[:8]}"
        registration = ReplicaRegistration(
            replica_id=replica_id,
            url="",
            pool=pool.name,
            site=pool.site,
            generation=pool.generation,
            engine=pool.engine,
            node=node,
            time_scale=pool.time_scale if pool.time_scale is not None else 1.0,
        )
        engine = EngineSpec(
            engine=pool.engine,
            model=self._model,
            generation=pool.generation,
            host="",
            time_scale=pool.time_scale,
            extra_args=pool.engine_args,
            # A placeholder: the actor takes the GPU ids Ray assigns it (replica_actor.py).
            gpu_indices=tuple(range(pool.gpus_per_replica)),
        )
        options = replica_options(
            pool,
            node,
            name=f"replica-{replica_id}",
            namespace=self._namespace,
            uses_real_gpus=self._uses_real_gpus,
        )
        handle = ReplicaActorClass.options(**options).remote(
            registration, engine, self._registry, self._heartbeat_s
        )
        self._launched[replica_id] = Launched(
            pool.name, node, pool.gpus_per_replica, time.monotonic(), handle, handle.start.remote()
        )
        log.info("starting replica %s of pool %s on node %s", replica_id, pool.name, node)

    def _stop(self, replica_id: str, *, graceful: bool = True) -> None:
        """Stop the replica's actor; `graceful=False` (its node died) only kills what is left."""
        launched = self._launched.pop(replica_id, None)
        if launched is not None:
            if graceful:
                with contextlib.suppress(Exception):
                    ray.get(launched.handle.stop.remote(), timeout=_STOP_TIMEOUT_S)
            with contextlib.suppress(Exception):
                ray.kill(launched.handle)
        ray.get(self._registry.deregister_replica.remote(replica_id), timeout=_CALL_TIMEOUT_S)
