"""One router process, minus its transports: the routing table, live fleet state, profile,
admission control, per-key limits, dispatcher, scraper, capacity estimator and metrics, started
and stopped together.

Replica load comes one of two ways, into the same `FleetState`: a router that follows the control
plane takes it from the routing table (`apply_loads`: one scrape per engine, for every router,
with the control plane's capacity estimate); a file-fed router scrapes each replica itself
(`ReplicaScraper`, with its own estimator).

The HTTP frontend and the gRPC frontend both call `RouterService.dispatch` (limits, admission,
then the dispatcher) and both authenticate through `api_keys`; neither owns state.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Gauge

from orchestrator.admission.controller import AdmissionController, FleetRoom, Ticket
from orchestrator.admission.keys import ApiKey, KeyAuthority
from orchestrator.admission.limits import KeyLease, KeyLimiter, check_background
from orchestrator.admission.metrics import AdmissionMetrics
from orchestrator.core.clock import Clock, MonotonicClock
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.records import LoadReport, Replica, ReplicaState
from orchestrator.core.slo import MLPERF_TTFT_S
from orchestrator.forwarding.breaker import CircuitBreakers
from orchestrator.forwarding.dispatcher import Dispatcher, UpstreamReply
from orchestrator.forwarding.event_stream import RESPONSES_PATH, response_id
from orchestrator.forwarding.metrics import RouterMetrics
from orchestrator.forwarding.passthrough import Passthrough, ReplicaUnreachable, WholeReply
from orchestrator.forwarding.scraper import ReplicaScraper
from orchestrator.forwarding.stored_responses import StoredResponses
from orchestrator.forwarding.upstream import UpstreamPool
from orchestrator.router_settings import (
    REQUEST_DEADLINE_S,
    RouterConfig,
    RouterSettings,
    profile_named,
    router_profile,
)
from orchestrator.routing.context import RequestContext, class_lanes
from orchestrator.routing.estimator import CapacityEstimator
from orchestrator.routing.fleet_state import FleetState
from orchestrator.routing.profile import Profile
from orchestrator.routing.stats import ReplicaStats
from orchestrator.table.snapshot import RoutingTable
from orchestrator.table.source import TableHolder
from orchestrator.table.static_file import load_replicas_file

log = logging.getLogger(__name__)

__all__ = ["REQUEST_DEADLINE_S", "RouterConfig", "RouterService", "RouterSettings", "profile_named"]


class _Held:
    """What a request holds until its answer's last byte: its admission slot and its key's
    lease. An object rather than closures in `dispatch`: compiled, a closure holds the whole
    frame of `dispatch` (the reply included) and the frame holds the closure, a cycle per
    request that only the cyclic collector frees."""

    __slots__ = ("books", "lease", "ticket")

    def __init__(self, ticket: Ticket, lease: KeyLease | None) -> None:
        self.ticket = ticket
        self.lease = lease
        self.books: Callable[[], int] | None = None  # a whole answer's own books, when later

    def ended(self, output_tokens: int) -> None:
        self.ticket.release()
        if self.lease is not None:
            self.lease.finish(output_tokens)

    def settle(self) -> int:
        """Close the answer's books, then give back the slot and the lease; returns its
        output tokens."""
        tokens = self.books() if self.books is not None else 0
        self.ended(tokens)
        return tokens


class RouterService:
    """Composes the router's parts; `start()` and `stop()` inside the serving event loop."""

    def __init__(
        self,
        table: TableHolder,
        profile: Profile,
        *,
        settings: RouterSettings | None = None,
        registry: CollectorRegistry | None = None,
        clock: Clock | None = None,
        scrape_replicas: bool = True,
    ) -> None:
        """`scrape_replicas=False` for a router whose load comes from the control plane's table
        (`apply_loads`); it then neither scrapes nor health-checks replicas itself."""
        self.settings = settings or RouterSettings()
        self.scrape_replicas = scrape_replicas
        self.table = table
        self.clock = clock or MonotonicClock()
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.metrics = RouterMetrics(self.registry)
        self.slo = self.settings.wall_slo
        self.metrics.show_targets(self.slo, tuple(table.snapshot().models))
        self.class_lanes = class_lanes(self.slo)
        self.fleet = FleetState(
            self.settings.reference_tpot_s,
            clock=self.clock.now,
            history_s=self.settings.load_stale_after_s,
        )
        self.fleet.sync(table.snapshot())
        self.estimator = CapacityEstimator(
            target_ttft_s=MLPERF_TTFT_S * self.settings.latency_scale,
            target_tpot_s=self.settings.reference_tpot_s,
            load_tpot_s=min(target.tpot_s for _, _, target in self.slo.rows()),
        )
        self.breakers = CircuitBreakers(self.fleet, self.settings.breaker, self.clock)
        self.upstream = UpstreamPool(self.settings.upstream)
        self.dispatcher = Dispatcher(
            table=table,
            fleet=self.fleet,
            profile=profile,
            breakers=self.breakers,
            upstream=self.upstream,
            metrics=self.metrics,
            settings=self.settings.dispatch_settings(self.slo),
            clock=self.clock,
        )
        self.scraper = ReplicaScraper(
            table=table.snapshot,
            fleet=self.fleet,
            estimator=self.estimator,
            breakers=self.breakers,
            upstream=self.upstream,
            metrics=self.metrics,
            interval_s=self.settings.scrape_interval_s,
            clock=self.clock,
        )
        self.admission_metrics = AdmissionMetrics(self.registry)
        self.admission = AdmissionController(
            self.settings.admission,
            self.room_of,
            metrics=self.admission_metrics,
            latency_scale=self.settings.latency_scale,
            on_waiting=self._waiting_moved,
        )
        self.key_limiter = KeyLimiter(self.admission_metrics)
        self.passthrough = Passthrough(
            self.upstream,
            self.metrics,
            self.clock,
            connect_timeout_s=self.settings.connect_timeout_s,
        )
        self.stored_responses = StoredResponses(table.snapshot, self.passthrough, self.clock.now)
        self.api_keys: KeyAuthority | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._indexed: tuple[RoutingTable, dict[str, Replica]] | None = None
        self._ready: tuple[RoutingTable, dict[str, tuple[ReplicaStats, ...]]] | None = None
        # per replica with a report since the table changed: its circuit and capacity gauges
        self._load_gauges: dict[str, tuple[Gauge, Gauge]] = {}
        self._routable_counted: tuple[RoutingTable, int] | None = None  # (table, circuit changes)

    @classmethod
    def from_config(
        cls, config: RouterConfig, registry: CollectorRegistry | None = None
    ) -> RouterService:
        """Load the replicas file and the profile; raises `OrchestratorError` naming the field."""
        table = load_replicas_file(config.replicas_file)
        profile = router_profile(config.profile)
        return cls(TableHolder(table), profile, settings=config.settings, registry=registry)

    @property
    def profile(self) -> Profile:
        return self.dispatcher.profile

    async def start(self) -> None:
        """Open the upstream pool, then follow the table and scrape replicas in the background."""
        if self._tasks:
            return
        await self.upstream.start()
        self._tasks = [asyncio.create_task(self._follow_table(), name="router-table")]
        if self.scrape_replicas:
            self._tasks.append(asyncio.create_task(self.scraper.run(), name="router-scraper"))

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.upstream.close()

    async def __aenter__(self) -> RouterService:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    def use_api_keys(self, keys: KeyAuthority | None) -> None:
        """Require `keys` on every frontend (None: no keys); one limiter state per key, shared by
        HTTP and gRPC, and a reload drops the state of keys that left."""
        self.api_keys = keys
        if keys is not None:
            keys.on_reload(self.key_limiter.forget_except)

    def deadline_s(self) -> float:
        """The absolute deadline (dispatcher clock) of a request that arrives now."""
        return self.clock.now() + self.settings.scaled_deadline_s

    async def dispatch(
        self,
        ctx: RequestContext,
        path: str,
        body: bytes,
        *,
        deadline_s: float,
        key: ApiKey | None = None,
        settle_later: bool = False,
    ) -> UpstreamReply:
        """The key's limits, then admission, then the dispatcher; raises `Refused` (429) when a
        limit or the fleet's capacity says no. The key's lease and the admission slot are held
        until the answer's last byte (for a stream, until its relay ends). With
        `settle_later`, a whole answer's books (its attempt, slot and lease) close when the
        caller calls `reply.settle()`, which it must do in the same event-loop step, once the
        answer is written (`Dispatcher.dispatch`).

        A request that continues a stored response goes to its holder (NOT_FOUND when gone);
        the id of every response made on `RESPONSES_PATH` is remembered with its replica.
        """
        lease: KeyLease | None = None
        if key is not None:
            if ctx.background:
                check_background(key)
            lease = self.key_limiter.acquire(key)
        try:
            if ctx.stored_response_id is not None and ctx.replica_id is None:
                holder = await self.stored_responses.holder(
                    ctx.stored_response_id, param="previous_response_id", model=ctx.model
                )
                ctx = dataclasses.replace(ctx, replica_id=holder.replica_id)
            ticket = await self.admission.admit(ctx.model, ctx.priority)
        except BaseException:
            if lease is not None:
                lease.finish(0)
            raise
        try:
            reply = await self.dispatcher.dispatch(
                ctx, path, body, deadline_s=deadline_s, settle_later=settle_later
            )
        except BaseException:
            ticket.release()
            if lease is not None:
                lease.finish(0)
            raise

        held = _Held(ticket, lease)
        if reply.chunks is not None:
            reply.chunks.on_end = held.ended
        elif reply.settle is None:
            held.ended(reply.output_tokens)
        else:
            held.books = reply.settle
            reply.settle = held.settle
        if path == RESPONSES_PATH and reply.status < 300:
            head = reply.body if reply.chunks is None else reply.chunks.head
            self.stored_responses.remember(response_id(head or b""), reply.replica)
        return reply

    def routable_of(self, model: str | None) -> list[Replica]:
        """Replicas of `model` (any model: None) that would take a request now, least loaded
        by this router first: what a request that any of them can answer is sent to."""
        table = self.table.snapshot()
        found = []
        for candidate in self.fleet.candidates(table):
            replica, stats = candidate.replica, candidate.stats
            if model is not None and replica.model != model:
                continue
            if replica.state is ReplicaState.READY and not stats.circuit_open:
                found.append((stats.in_flight, replica.replica_id, replica))
        return [replica for *_, replica in sorted(found)]

    async def stored_response(
        self,
        response_id: str,
        *,
        cancel: bool = False,
        body: bytes = b"",
        key: ApiKey | None = None,
    ) -> WholeReply:
        """Retrieve (GET) or cancel (POST .../cancel) a stored response, on its holder only;
        it counts against `key`'s request limits before anything is looked for."""
        lease = None if key is None else self.key_limiter.acquire(key)
        try:
            return await self._stored_response(response_id, cancel, body)
        finally:
            if lease is not None:
                lease.finish(0)

    async def _stored_response(self, response_id: str, cancel: bool, body: bytes) -> WholeReply:
        holder = await self.stored_responses.holder(response_id)
        path = f"{RESPONSES_PATH}/{response_id}" + ("/cancel" if cancel else "")
        try:
            return await self.passthrough.send(
                holder,
                "POST" if cancel else "GET",
                path,
                body or b"{}",
                deadline_s=self.deadline_s(),
            )
        except ReplicaUnreachable as error:
            raise OrchestratorError(
                ErrorCode.UNAVAILABLE,
                f"the replica that holds response {response_id!r} did not answer: {error}",
            ) from None

    async def to_any_replica(
        self, model: str | None, method: str, path: str, body: bytes
    ) -> WholeReply:
        """A request any routable replica of `model` answers whole (tokenize, models)."""
        return await self.passthrough.send_to_any(
            self.routable_of(model), method, path, body, deadline_s=self.deadline_s()
        )

    def _waiting_moved(self, model: str, slo_class: str, delta: int) -> None:
        """Requests waiting in admission count in their class's demand for reserved room. The
        targets are frozen settings, fixed for the service's life, so a request's +1 and its -1
        land on the same target."""
        self.fleet.waiting(self.slo.target(model, slo_class).tpot_s, delta)

    def room_of(self, model: str, slo_class: str) -> FleetRoom | None:
        """The concurrent requests of `slo_class` the routable replicas of `model` sustain within
        that class's TPOT target, or the tighter one a replica's batch is held to
        (`ReplicaStats.binding_tpot_s`), what other routers run on them, and the part held for
        this class (replicas reserved for its target), and the requests that would still fit one by
        one on a replica within the target binding there, its room scaled by the admission's
        capacity factor as the fleet-wide limit is (on a replica reserved for a tighter class,
        only what that class leaves: `ReplicaStats.room_for_looser`)."""
        tpot_s = self.slo.target(model, slo_class).tpot_s
        factor = self.settings.admission.capacity_factor
        capacity = reserved = free = free_reserved = others = 0.0
        for stats in self._ready_stats(model):
            if stats.circuit_open:
                continue
            tightest = stats.tightest_tpot_s  # `stats.binding_tpot_s(tpot_s)`, inlined
            if stats.reserved_tpot_s < tightest:
                tightest = stats.reserved_tpot_s
            sequences = stats.concurrency_capacity(tightest if tightest < tpot_s else tpot_s)
            capacity += sequences
            held = stats.reserved_tpot_s == tpot_s
            if held:
                reserved += sequences
            others += stats.others
            room = sequences * factor - stats.in_flight - stats.others
            if stats.reserved_tpot_s < tpot_s:  # held for a tighter class: what it leaves
                room = min(room, stats.room_for_looser(factor))
            elif held and stats.queued_behind_looser():
                room = 0.0  # not until its engine's queue of looser work is through
            if room >= 1.0:
                free += math.floor(room)
                if held:
                    free_reserved += math.floor(room)
        if reserved > 0:  # routing sends this class only there (filter `slo-reserved`)
            free = free_reserved
        return FleetRoom(capacity, others, reserved, free) if capacity > 0 else None

    def _ready_stats(self, model: str) -> tuple[ReplicaStats, ...]:
        """The stats of `model`'s ready replicas in the current table, listed once per table: the
        room is read twenty times a second per class, and at 512 replicas walking the whole
        table for it cost more than a routing decision."""
        table = self.table.snapshot()
        if self._ready is None or self._ready[0] is not table:
            by_model: dict[str, list[ReplicaStats]] = {}
            for candidate in self.fleet.candidates(table):
                if candidate.replica.state is ReplicaState.READY:
                    by_model.setdefault(candidate.replica.model, []).append(candidate.stats)
            self._ready = (table, {m: tuple(stats) for m, stats in by_model.items()})
        return self._ready[1].get(model, ())

    def models(self) -> list[str]:
        """Models served by the current table, sorted."""
        return sorted(self.table.snapshot().models)

    def routable_replicas(self) -> int:
        """Replicas this router would send a request to now: ready, and circuit closed."""
        count = 0
        for replica in self.table.snapshot().replicas:
            stats = self.fleet.stats(replica.replica_id)
            if replica.state is ReplicaState.READY and stats is not None and not stats.circuit_open:
                count += 1
        return count

    def apply_loads(self, reports: Iterable[LoadReport]) -> None:
        """Take load reports from the control plane's table: the load (dated on this router's
        clock), the shared capacity estimate, and a heartbeat's worth of health (a report means
        the control plane read the engine's page within its heartbeat timeout, as a passed
        health check would). Reports for replicas not in the current table are ignored."""
        by_id = self._replicas_by_id()
        now_s = self.clock.now()
        stale_after_s = self.settings.load_stale_after_s
        for report in reports:
            replica = by_id.get(report.replica_id)
            if replica is None:
                continue
            stats = self.fleet.reported(
                report.replica_id, report.load, now_s=now_s, stale_after_s=stale_after_s,
                problem=report.problem,
            )  # fmt: skip
            if stats is None:
                continue
            if report.capacity_tokens_per_s is not None:
                stats.capacity_tokens_per_s = report.capacity_tokens_per_s
            self.breakers.health_checked(report.replica_id, True)
            gauges = self._load_gauges.get(report.replica_id)
            if gauges is None:
                gauges = self._load_gauges[report.replica_id] = (
                    self.metrics.circuit_open.labels(report.replica_id),
                    self.metrics.capacity.labels(
                        replica.site, replica.pool, replica.generation.value, replica.replica_id
                    ),
                )
            gauges[0].set(1 if stats.circuit_open else 0)
            gauges[1].set(stats.capacity_tokens_per_s)
        self.fleet.reports_taken(now_s)
        table = self.table.snapshot()
        counted = (table, self.fleet.circuit_changes)
        if self._routable_counted != counted:  # the same table and circuits count the same
            self._routable_counted = counted
            self.metrics.count_routable(self.fleet.routable_per_model(table.replicas))

    def _replicas_by_id(self) -> dict[str, Replica]:
        """The current table's replicas by id, with their stats made (once per table)."""
        table = self.table.snapshot()
        if self._indexed is None or self._indexed[0] is not table:
            self.fleet.sync(table)
            self._indexed = (table, {r.replica_id: r for r in table.replicas})
            self._load_gauges = {}
        return self._indexed[1]

    async def _follow_table(self) -> None:
        """Keep fleet state, estimator, breakers and metrics in step with table changes."""
        async for table in self.table.watch():
            self.fleet.sync(table)
            self.dispatcher.table_changed(table)  # streams on draining replicas move
            # Against the live set, not the previous table: versions in between may be skipped
            # here while requests and scrapes already used them.
            live = {r.replica_id for r in table.replicas}
            self.estimator.forget_except(live)
            self.breakers.forget_except(live)
            self.metrics.forget_except(live)
            self.metrics.show_replicas(table.replicas)
            self.upstream.forget_except({r.url for r in table.replicas})
            self.admission.forget_models_except(set(table.models))
            log.info("routing table version %d: %d replicas", table.version, len(table.replicas))
