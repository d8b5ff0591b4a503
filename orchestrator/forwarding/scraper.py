"""The file-fed router's own view of each replica (`router --config`): poll `/health` and
`/metrics`, store the engine's load, fold it into the capacity estimate, and let health decide the
replica's circuit (see `breaker`). A router that follows the control plane does none of this: the
control plane scrapes each engine once and streams the load in the routing table.

A round visits every replica once, spread evenly over the round (one page at a time, never a
burst that stalls the event loop), and a round lasts longer as the fleet grows: at most
`pages_per_s` replicas a second, at least `interval_s` per round. A load older than three rounds is
stale (`FleetState.reported`). Only the series the adapter reads are parsed.

Health here is router-local: a replica that fails its checks is skipped by this router, not
removed from the shared routing table. A failed scrape or check is logged and counted, never
raised: the loop outlives any replica.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from orchestrator.config.router_timing import DEFAULT_SCRAPE_INTERVAL_S
from orchestrator.core.clock import Clock, MonotonicClock
from orchestrator.core.records import Replica
from orchestrator.engines import adapter_for
from orchestrator.engines.metrics import MAX_PAGE_BYTES
from orchestrator.forwarding.attempts import UpstreamErrorKind
from orchestrator.forwarding.breaker import BreakerState, CircuitBreakers
from orchestrator.forwarding.metrics import RouterMetrics
from orchestrator.forwarding.upstream import UpstreamError, UpstreamPool
from orchestrator.routing.estimator import CapacityEstimator
from orchestrator.routing.fleet_state import FleetState
from orchestrator.table.snapshot import RoutingTable

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = DEFAULT_SCRAPE_INTERVAL_S  # the `router.timing` section's
DEFAULT_TIMEOUT_S = 2.0
# Replicas visited per second at most: under a tenth of a core with vLLM-sized pages (7-9% at 512
# replicas in `bench.fleet_scale`); 64 replicas are still visited every second, 512 every 8 s.
DEFAULT_PAGES_PER_S = 64.0
STALE_AFTER_ROUNDS = 3


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
        pages_per_s: float = DEFAULT_PAGES_PER_S,
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
        self.pages_per_s = pages_per_s
        self._clock = clock or MonotonicClock()
        self.rounds = 0

    def round_s(self, replicas: int) -> float:
        """How long one round over `replicas` replicas lasts."""
        return max(self.interval_s, replicas / self.pages_per_s)

    def stale_after_s(self, replicas: int) -> float:
        return STALE_AFTER_ROUNDS * self.round_s(replicas)

    async def run(self) -> None:
        """Scrape forever: the first round at once (a new router knows its fleet from the start),
        then round after round, each replica's visit at its slot in the round (a slow replica
        delays nobody else; a slow round delays the next, never overlaps)."""
        first = True
        while True:
            try:
                if first:
                    first = False
                    await self.scrape_all()
                    await asyncio.sleep(self.interval_s)
                    continue
                await self._paced_round()
            except Exception:  # a bug here must not stop health checking for good
                log.exception("scrape round failed")
                await asyncio.sleep(self.interval_s)

    async def _paced_round(self) -> None:
        replicas = self._table().replicas
        if not replicas:
            await asyncio.sleep(self.interval_s)
            return
        gap_s = self.round_s(len(replicas)) / len(replicas)
        started = self._clock.now()
        visits = []
        listed = self._table()
        listed_ids = {r.replica_id for r in listed.replicas}
        for index, replica in enumerate(replicas):
            if self._table() is not listed:  # the table changed during the round
                listed = self._table()
                listed_ids = {r.replica_id for r in listed.replicas}
            if replica.replica_id in listed_ids:  # a replica that left is not visited
                visits.append(asyncio.create_task(self.scrape(replica, len(replicas))))
            await asyncio.sleep(max(0.0, started + (index + 1) * gap_s - self._clock.now()))
        await asyncio.gather(*visits)
        self._finish_round(replicas)

    async def scrape_all(self) -> None:
        """One round over every replica of the current table, all at once (tests and start-up)."""
        replicas = self._table().replicas
        await asyncio.gather(*(self.scrape(replica, len(replicas)) for replica in replicas))
        self._finish_round(replicas)

    def _finish_round(self, replicas: Sequence[Replica]) -> None:
        self._metrics.count_routable(self._fleet.routable_per_model(replicas))
        self.rounds += 1

    async def scrape(self, replica: Replica, fleet_size: int = 1) -> None:
        """Health check, then load and capacity; updates the breaker, stats and gauges.

        `fleet_size` sets how long the load stays fresh (three rounds of that many replicas)."""
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
        if page is None:
            return
        now_s = self._clock.now()
        stale_after_s = self.stale_after_s(fleet_size)
        try:
            load = adapter.parse_load(page, now_s)
        except ValueError as error:
            log.warning("replica %s: unreadable /metrics page: %s", replica.replica_id, error)
            self._metrics.upstream_errors.labels(
                replica.replica_id, UpstreamErrorKind.SCRAPE.value
            ).inc()
            self._fleet.reported(
                replica.replica_id, None, now_s=now_s, stale_after_s=stale_after_s,
                problem=str(error),
            )  # fmt: skip
            return
        stats = self._fleet.reported(
            replica.replica_id, load, now_s=now_s, stale_after_s=stale_after_s
        )
        if stats is None:
            return
        self._estimator.update(replica.replica_id, stats, load, now_s)
        self._metrics.capacity.labels(
            replica.site, replica.pool, replica.generation.value, replica.replica_id
        ).set(stats.capacity_tokens_per_s)

    async def _get(self, replica: Replica, path: str) -> str | None:
        """The page's text if the replica answered 200 in time, within `MAX_PAGE_BYTES`, else
        None."""
        try:
            response = await self._upstream.get(
                replica.url, path, timeout_s=self.timeout_s, connect_timeout_s=self.timeout_s
            )
            try:
                if response.status != 200:
                    log.debug("replica %s: GET %s -> %d", replica.replica_id, path, response.status)
                    return None
                page = await response.read(MAX_PAGE_BYTES)
            finally:
                response.release()
            return page.decode("utf-8", errors="replace")
        except (UpstreamError, TimeoutError) as error:
            log.debug("replica %s: GET %s failed: %r", replica.replica_id, path, error)
            return None
