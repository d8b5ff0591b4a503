"""The registry's bookkeeping, without Ray: desired pools, observed replicas, node health, versions.

The `Registry` actor is a thin wrapper around one `RegistryState`, so every rule here is tested as a
plain object. Rules:

- The routing table lists registered replicas that are `ready` or `draining`; a replica whose last
  heartbeat (registration counts as one) is older than `heartbeat_timeout_s` is listed `unhealthy`
  until its next heartbeat; a `gone` replica is not listed.
- A `draining` replica becomes `gone` on the first heartbeat, at least `drain_grace_s` after the
  drain began, whose load shows nothing running or waiting: by then every router has stopped
  sending to it, and what it had has finished.
- Draining a pool drains all its replicas and sets its desired size to 0, so the reconciler does not
  replace them; draining one replica leaves the size alone, so the reconciler replaces it.
- The version grows by one on every change a router or the reconciler can see (the table, the
  desired sizes). `first_version` lets a restarted registry start above every version it handed
  out before (the actor passes wall-clock milliseconds), because routers only take newer versions.
- Load alone does not bump the version: the table's load has its own `load_version`
  (`ReplicaLoads`), so hundreds of heartbeats a second do not rebuild every router's table, and
  reaches watchers as deltas (`loads_since`). A heartbeat without a load (the engine answered,
  its page was an adapter error) keeps the replica listed and counts the error.
- Each pool's learned capacity (the sum of its ready replicas' estimates) is sampled into a
  bounded `CapacityHistory` as heartbeats arrive, which finds step changes at an unchanged size.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace

from orchestrator.config.schema import OrchestratorConfig, PoolSpec
from orchestrator.controlplane.capacity_history import CapacityHistory, CapacitySample
from orchestrator.controlplane.reconcile import ObservedState
from orchestrator.controlplane.registry_records import (
    HeartbeatReply,
    RegistryStatus,
    ReplicaRecord,
    ReplicaRegistration,
    ReplicaStatus,
)
from orchestrator.controlplane.replica_loads import ReplicaLoads
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.records import (
    EngineKind,
    NodeHealth,
    Replica,
    ReplicaLoad,
    ReplicaState,
)
from orchestrator.core.slo import MLPERF_TPOT_S, MLPERF_TTFT_S
from orchestrator.fleet.figures import FleetFigures, capacity_prior_tokens_per_s, load_figures
from orchestrator.routing.estimator import CapacityEstimator
from orchestrator.table.snapshot import LoadDelta, RoutingTable

DEFAULT_HEARTBEAT_TIMEOUT_S = 3.0
DEFAULT_DRAIN_GRACE_S = 2.0


class RegistryState:
    """Desired pools (from config, then `scale` and `drain`), observed replicas, node health."""

    def __init__(
        self,
        config: OrchestratorConfig,
        *,
        now_s: Callable[[], float],
        first_version: int = 1,
        heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S,
        drain_grace_s: float = DEFAULT_DRAIN_GRACE_S,
        figures: FleetFigures | None = None,
        sizes: Mapping[str, int] | None = None,
        rebuild_s: float = 0.0,
        estimator: CapacityEstimator | None = None,
        history: CapacityHistory | None = None,
    ) -> None:
        """`sizes` overrides config's desired sizes (what `scale` and `drain` set before a restart);
        entries for pools no longer in config, or external ones, are ignored. `rebuild_s` > 0 marks
        a restarted registry: see `rebuilt`. `estimator` learns each replica's capacity from its
        heartbeats (by default against the router's default latency targets, unscaled);
        `history` keeps each pool's learned capacity over time (default thresholds)."""
        self._config = config
        self._now_s = now_s
        self._version = first_version
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self._drain_grace_s = drain_grace_s
        self._figures = figures if figures is not None else load_figures()
        self._pools: dict[str, PoolSpec] = {pool.name: pool for pool in config.pools}
        for name, size in (sizes or {}).items():
            pool = self._pools.get(name)
            if pool is not None and pool.replicas is not None and size >= 0:
                self._pools[name] = pool.model_copy(update={"replicas": size})
        self._replicas: dict[str, ReplicaRecord] = {}
        self._node_health: dict[str, NodeHealth] = {}
        self._stale: frozenset[str] = frozenset()
        self._unplaceable: dict[str, str] = {}
        self._rebuilding_until_s: float | None = now_s() + rebuild_s if rebuild_s > 0 else None
        self._loads = ReplicaLoads(estimator or default_estimator(1.0), now_s=now_s)
        self._history = history or CapacityHistory()

    @property
    def version(self) -> int:
        return self._version

    @property
    def load_version(self) -> int:
        return self._loads.version

    @property
    def config(self) -> OrchestratorConfig:
        return self._config

    def desired_pools(self) -> tuple[PoolSpec, ...]:
        """The pools in config order, with the sizes `scale` and `drain` have set since."""
        return tuple(self._pools.values())

    def sizes(self) -> dict[str, int]:
        """The desired size of each launched pool: what a restarted registry must not forget."""
        return {p.name: p.replicas for p in self._pools.values() if p.replicas is not None}

    def replicas(self) -> tuple[ReplicaRecord, ...]:
        return tuple(sorted(self._replicas.values(), key=lambda r: r.replica_id))

    def node_health(self) -> Mapping[str, NodeHealth]:
        return dict(self._node_health)

    def rebuilt(self) -> bool:
        """Whether the table is whole enough to hand to routers.

        A restarted registry starts empty and fills as replicas re-register; a router given the
        table before that would stop routing to replicas that are serving fine. So it is not
        rebuilt until every pool has its desired size registered again (an external pool: one per
        endpoint), or `rebuild_s` has passed since the restart: a replica that has not re-registered
        by then is taken as lost. Once rebuilt, it stays so.
        """
        if self._rebuilding_until_s is None:
            return True
        listed = Counter(r.registration.pool for r in self._replicas.values())
        whole = all(listed[pool.name] >= _expected_size(pool) for pool in self._pools.values())
        if whole or self._now_s() >= self._rebuilding_until_s:
            self._rebuilding_until_s = None
        return self._rebuilding_until_s is None

    def register(self, registration: ReplicaRegistration) -> int:
        """Add or refresh a replica as `ready`; a re-registration keeps a drain under way."""
        now = self._now_s()
        known = self._replicas.get(registration.replica_id)
        if known is not None and known.state is not ObservedState.READY:
            record = replace(known, registration=registration, last_heartbeat_s=now)
        else:
            record = ReplicaRecord(registration, ObservedState.READY, now, now)
        self._replicas[registration.replica_id] = record
        self._stale = self._stale - {registration.replica_id}
        return self._bump()

    def deregister(self, replica_id: str) -> bool:
        """Forget a replica; returns whether it was known."""
        if self._replicas.pop(replica_id, None) is None:
            return False
        self._loads.forget(replica_id)
        self._stale = self._stale - {replica_id}
        self._bump()
        return True

    def heartbeat(
        self, replica_id: str, load: ReplicaLoad | None, problem: str = "", age_s: float = 0.0
    ) -> HeartbeatReply:
        """Record `load` (or, when `None`, the adapter's `problem` reading the page), read `age_s`
        before it was sent; a draining replica with nothing in flight after the grace becomes
        gone."""
        record = self._replicas.get(replica_id)
        if record is None:
            return HeartbeatReply(known=False)
        now = self._now_s()
        changed = replica_id in self._stale
        self._stale = self._stale - {replica_id}
        record = replace(record, last_heartbeat_s=now, load=load)
        self._loads.record(
            replica_id,
            load,
            prior_tokens_per_s=self._prior(record.registration),
            problem=problem,
            age_s=age_s,
        )
        if (
            record.state is ObservedState.DRAINING
            and now - record.since_s >= self._drain_grace_s
            and load is not None
            and load.running == 0
            and load.waiting == 0
        ):
            record = replace(record, state=ObservedState.GONE, since_s=now)
            self._loads.forget(replica_id)
            changed = True
        self._replicas[replica_id] = record
        if changed:
            self._bump()
        self._sample_capacity(record.registration.pool, now)
        return HeartbeatReply(known=True, state=record.state)

    def report_node_health(self, node: str, health: NodeHealth) -> None:
        if self._node_health.get(node, NodeHealth.HEALTHY) is not health:
            self._bump()
        self._node_health[node] = health

    def report_unplaceable(self, reasons: Mapping[str, str]) -> None:
        """Replace the reconciler's last word on pools it could not bring to size (pool → why).

        Operators read it; routers do not, so the version stays.
        """
        self._unplaceable = dict(reasons)

    def drain(self, target: str) -> tuple[str, ...]:
        """Drain a pool (size to 0) or one replica; returns the replicas now draining.

        Raises NOT_FOUND when `target` names neither a pool nor a registered replica.
        """
        if target in self._pools:
            pool = self._pools[target]
            if pool.replicas is not None:
                self._pools[target] = pool.model_copy(update={"replicas": 0})
            ids = tuple(r.replica_id for r in self.replicas() if r.registration.pool == target)
        elif target in self._replicas:
            ids = (target,)
        else:
            raise OrchestratorError(
                ErrorCode.NOT_FOUND,
                f"{target!r} is neither a pool ({', '.join(self._pools) or 'none'}) nor a"
                " registered replica",
                param="target",
            )
        now = self._now_s()
        for replica_id in ids:
            record = self._replicas[replica_id]
            if record.state is ObservedState.READY:
                self._replicas[replica_id] = replace(
                    record, state=ObservedState.DRAINING, since_s=now
                )
        self._bump()
        return ids

    def scale(self, pool_name: str, replicas: int) -> None:
        """Set a launched pool's desired size; raises NOT_FOUND or INVALID_ARGUMENT."""
        # `config.pool` raises NOT_FOUND naming the pools there are; both hold the same names.
        pool = self._pools.get(pool_name) or self._config.pool(pool_name)
        if replicas < 0:
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT,
                f"a pool's size must be >= 0, got {replicas}",
                param="replicas",
            )
        if pool.engine is EngineKind.EXTERNAL:
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT,
                f"pool {pool_name!r} is external: it is sized by its endpoints, not scaled",
                param="pool",
            )
        self._pools[pool_name] = pool.model_copy(update={"replicas": replicas})
        self._bump()

    def expire(self) -> bool:
        """Mark replicas whose heartbeats stopped; returns whether the table changed."""
        cutoff = self._now_s() - self._heartbeat_timeout_s
        stale = frozenset(
            r.replica_id for r in self._replicas.values() if r.last_heartbeat_s < cutoff
        )
        if stale == self._stale:
            return False
        self._stale = stale
        self._bump()
        return True

    def table(self) -> RoutingTable:
        """The routing table at the current version (rules: module docstring)."""
        listed = [
            self._replica(record)
            for record in self.replicas()
            if record.state in (ObservedState.READY, ObservedState.DRAINING)
        ]
        reports = self._loads.all()
        loads = {r.replica_id: reports[r.replica_id] for r in listed if r.replica_id in reports}
        return RoutingTable(
            self._version,
            tuple(listed),
            self._config.site_records(),
            loads=loads,
            load_version=self._loads.version,
        )

    def loads_since(self, load_version: int) -> LoadDelta:
        """The load reports of listed replicas recorded after `load_version`."""
        listed = {
            r.replica_id
            for r in self._replicas.values()
            if r.state in (ObservedState.READY, ObservedState.DRAINING)
        }
        reports = tuple(r for r in self._loads.since(load_version) if r.replica_id in listed)
        return LoadDelta(self._version, self._loads.version, reports)

    def status(self) -> RegistryStatus:
        now = self._now_s()
        listed = {replica.replica_id: replica for replica in self.table().replicas}
        return RegistryStatus(
            self._version,
            self.desired_pools(),
            tuple(
                ReplicaStatus(
                    record,
                    listed.get(record.replica_id),
                    now - record.last_heartbeat_s,
                    self._loads.report(record.replica_id),
                )
                for record in self.replicas()
            ),
            dict(self._unplaceable),
            self._history.pools(),
        )

    def _sample_capacity(self, pool: str, now: float) -> None:
        """Add a sample of `pool`'s learned capacity when one is due: its ready, fresh replicas
        that have an estimate (a stale one's figure is not news)."""
        if not self._history.due(pool, now):
            return
        figures = [
            report.capacity_tokens_per_s
            for record in self._replicas.values()
            if record.registration.pool == pool
            and record.state is ObservedState.READY
            and record.replica_id not in self._stale
            and (report := self._loads.report(record.replica_id)) is not None
            and report.capacity_tokens_per_s is not None
        ]
        self._history.record(pool, CapacitySample(now, len(figures), sum(figures)))

    def _prior(self, reg: ReplicaRegistration) -> float:
        prior = capacity_prior_tokens_per_s(self._figures, reg.generation)
        return prior / reg.time_scale if reg.time_scale > 0 else prior

    def _replica(self, record: ReplicaRecord) -> Replica:
        reg = record.registration
        if record.replica_id in self._stale:
            state = ReplicaState.UNHEALTHY
        elif record.state is ObservedState.DRAINING:
            state = ReplicaState.DRAINING
        else:
            state = ReplicaState.READY
        return Replica(
            replica_id=reg.replica_id,
            url=reg.url,
            model=self._config.model,
            pool=reg.pool,
            site=reg.site,
            generation=reg.generation,
            engine=reg.engine,
            capacity_prior_tokens_per_s=self._prior(reg),
            node=reg.node,
            state=state,
            node_health=self._node_health.get(reg.node, NodeHealth.HEALTHY),
            engine_version=reg.engine_version,
        )

    def _bump(self) -> int:
        self._version += 1
        return self._version


def default_estimator(latency_scale: float) -> CapacityEstimator:
    """The estimator a router would run, its capacity stated at the reference (MLPerf) targets
    stretched by `latency_scale` (the config's `router.latencyScale` for a slowed-down simulated
    fleet), as the replicas' capacity priors are."""
    return CapacityEstimator(
        target_ttft_s=MLPERF_TTFT_S * latency_scale, target_tpot_s=MLPERF_TPOT_S * latency_scale
    )


def _expected_size(pool: PoolSpec) -> int:
    return len(pool.endpoints) if pool.engine is EngineKind.EXTERNAL else (pool.replicas or 0)
