"""Keep the router's picture of each replica fresh: poll `/health` and `/metrics` about once a
second, store the engine's load, fold it into the capacity estimate, and let health decide the
replica's circuit (see `breaker`).

Health here is router-local: a replica that fails its checks is skipped by this router, not
removed from the shared routing table. A failed scrape or check is logged and counted, never
raised: the loop outlives any replica.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from orchestrator.core.clock import Clock, MonotonicClock
from orchestrator.core.records import Replica, ReplicaState
from orchestrator.engines import adapter_for
from orchestrator.forwarding.breaker import BreakerState, CircuitBreakers
from orchestrator.forwarding.dispatcher import UpstreamErrorKind
from orchestrator.forwarding.metrics import RouterMetrics
from orchestrator.forwarding.upstream import UpstreamError, UpstreamPool
from orchestrator.routing.estimator import CapacityEstimator
from orchestrator.routing.fleet_state import FleetState
from orchestrator.table.snapshot import RoutingTable

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 1.0
DEFAULT_TIMEOUT_S = 2.0


class ReplicaScraper:
    """Polls every replica of the current table each `interval_s` seconds.

    `timeout_s` bounds one health check and one scrape each (wall seconds); a replica slower than
    that counts as failed for that round.
    """

    def __init__(
        self,
        *,
        table: Callable[[], RoutingTable],
        fleet: FleetState,
        estimator: CapacityEstimator,
        breakers: CircuitBreakers,
        upstream: UpstreamPool,
        metrics: RouterMetrics,
        interval_s: float = DEFAULT_INTERVAL_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        clock: Clock | None = None,
    ) -> None:
        self._table = table
        self._fleet = fleet
        self._estimator = estimator
        self._breakers = breakers
        self._upstream = upstream
        self._metrics = metrics
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._clock = clock or MonotonicClock()
        self.rounds = 0

    async def run(self) -> None:
        """Scrape forever, one round per interval (a slow round delays the next, never overlaps)."""
        while True:
            started = self._clock.now()
            try:
                await self.scrape_all()
            except Exception:  # a bug here must not stop health checking for good
                log.exception("scrape round failed")
            await asyncio.sleep(max(0.0, self.interval_s - (self._clock.now() - started)))

    async def scrape_all(self) -> None:
        """One round over every replica of the current table, concurrently."""
        replicas = self._table().replicas
        await asyncio.gather(*(self.scrape(replica) for replica in replicas))
        self._metrics.count_routable(self._routable_per_model(replicas))
        self.rounds += 1

    def _routable_per_model(self, replicas: Sequence[Replica]) -> dict[str, int]:
        """Ready replicas with a closed circuit, per model (as `/ready` counts them)."""
        counts = {replica.model: 0 for replica in replicas}
        for replica in replicas:
            stats = self._fleet.stats(replica.replica_id)
            if replica.state is ReplicaState.READY and stats is not None and not stats.circuit_open:
                counts[replica.model] += 1
        return counts

    async def scrape(self, replica: Replica) -> None:
        """Health check, then load and capacity; updates the breaker, stats and gauges."""
        adapter = adapter_for(replica.engine)
        healthy = await self._get(replica, adapter.health_path) is not None
        if not healthy:
            self._metrics.upstream_errors.labels(
                replica.replica_id, UpstreamErrorKind.HEALTH.value
            ).inc()
        self._breakers.health_checked(replica.replica_id, healthy)
        self._metrics.circuit_open.labels(replica.replica_id).set(
            0 if self._breakers.state(replica.replica_id) is BreakerState.CLOSED else 1
        )
        if not healthy:
            return
        page = await self._get(replica, "/metrics")
        stats = self._fleet.stats(replica.replica_id)
        if page is None or stats is None:
            return
        now_s = self._clock.now()
        try:
            load = adapter.parse_load(page, now_s)
        except ValueError as error:
            log.warning("replica %s: unreadable /metrics page: %s", replica.replica_id, error)
            self._metrics.upstream_errors.labels(
                replica.replica_id, UpstreamErrorKind.SCRAPE.value
            ).inc()
            return
        self._fleet.scraped(replica.replica_id, load)
        self._estimator.update(replica.replica_id, stats, load, now_s)
        self._metrics.capacity.labels(
            replica.site, replica.pool, replica.generation.value, replica.replica_id
        ).set(stats.capacity_tokens_per_s)

    async def _get(self, replica: Replica, path: str) -> str | None:
        """The page's text if the replica answered 200 in time, else None."""
        try:
            response = await self._upstream.get(
                replica.url, path, timeout_s=self.timeout_s, connect_timeout_s=self.timeout_s
            )
            try:
                if response.status != 200:
                    log.debug("replica %s: GET %s -> %d", replica.replica_id, path, response.status)
                    return None
                page = await response.read()
            finally:
                response.release()
            return page.decode("utf-8", errors="replace")
        except (UpstreamError, TimeoutError) as error:
            log.debug("replica %s: GET %s failed: %r", replica.replica_id, path, error)
            return None
