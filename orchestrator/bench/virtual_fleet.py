"""A fleet in virtual time: simulated replicas behind the real routing profile and estimator.

No sockets and no sleeping. Requests arrive on a schedule (open loop) or whenever the client's
window has room (closed loop, as an Offline harness keeps its queue full); each goes where the
profile decides, using the same `FleetState`, plugins and `CapacityEstimator` the router runs;
every replica is a `SimBatcher` on the fleet model; replicas are "scraped" once a second of
simulated time. Time jumps from event to event (an arrival, a step's end, a scrape) through one
heap, so the cost grows with steps and requests, not with replicas × events. Arrivals are read
from an iterable as they are due, so a generator keeps memory flat however long the run.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from orchestrator.bench.fast_step_cost import PrecomputedStepCost
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, Replica, ReplicaLoad
from orchestrator.fleet.step_cost import StepCostModel
from orchestrator.routing.context import RequestContext
from orchestrator.routing.estimator import CapacityEstimator
from orchestrator.routing.fleet_state import FleetState
from orchestrator.routing.plugin import Candidate, Decision, RoutingView
from orchestrator.sim.batcher import SimBatcher
from orchestrator.sim.latency_record import LatencyRecord
from orchestrator.sim.sequences import SimRequest
from orchestrator.table.snapshot import RoutingTable

MODEL = "openai/gpt-oss-120b"
SCRAPE_INTERVAL_S = 1.0


class Decides(Protocol):
    """What the fleet asks of its profile: a `Profile`, or a wrapper that records its picks
    (a protocol, so compiled code checks nothing of the object's class)."""

    def decide(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> Decision: ...


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    replica_id: str
    generation: Generation
    prior_tokens_per_s: float
    site: str = "local"


@dataclass(frozen=True, slots=True)
class Arrival:
    at_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass(slots=True)
class _Engine:
    replica: Replica
    batcher: SimBatcher
    busy: bool = False  # a step is scheduled on the heap
    generated: int = 0
    prompted: int = 0
    output_tokens: int = 0
    requests: list[SimRequest] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CapacitySample:
    at_s: float
    capacity_tokens_per_s: dict[str, float]


@dataclass(frozen=True, slots=True)
class FleetRun:
    """Per replica: output tokens and finished requests; capacity estimates every scrape.

    `ttfts_s` and `tpots_s` count (in buckets, for percentiles) the latencies of requests that
    arrived at or after the run's `measure_from_s`: TTFT as each first token comes out, TPOT as
    each request of more than one token finishes. `end_s` is when the last request finished (or
    the stop time); `first_tokens` counts measured requests that got their first token.
    `requests` is empty unless kept.
    """

    output_tokens: dict[str, int]
    requests: dict[str, list[SimRequest]]
    capacity: list[CapacitySample]
    generation_of: dict[str, Generation]
    pool_of: dict[str, str] = field(default_factory=dict)
    ttfts_s: LatencyRecord = field(default_factory=LatencyRecord)
    tpots_s: LatencyRecord = field(default_factory=LatencyRecord)
    end_s: float = 0.0
    finished: int = 0
    first_tokens: int = 0
    steps: int = 0

    def share(self, replica_id: str) -> float:
        total = sum(self.output_tokens.values())
        return self.output_tokens[replica_id] / total if total else 0.0

    def pool_shares(self) -> dict[str, float]:
        """Each pool's share of the output tokens, in [0, 1]."""
        total = sum(self.output_tokens.values())
        shares: dict[str, float] = {}
        for replica_id, tokens in self.output_tokens.items():
            pool = self.pool_of.get(replica_id, replica_id)
            shares[pool] = shares.get(pool, 0.0) + (tokens / total if total else 0.0)
        return shares


_STEP, _SCRAPE, _ARRIVAL = 0, 1, 2  # order of events due at the same instant


class VirtualFleet:
    """Replicas, one profile and one estimator, stepping through simulated time."""

    def __init__(
        self,
        replicas: Sequence[ReplicaSpec],
        profile: Decides,
        *,
        target_ttft_s: float = 3.0,
        target_tpot_s: float = 0.080,
        prompt_to_output: float | None = None,
        keep_requests: bool = True,
        record_capacity: bool = True,
    ) -> None:
        self.profile = profile
        self.target_ttft_s = target_ttft_s
        self.target_tpot_s = target_tpot_s
        self.keep_requests = keep_requests
        self.record_capacity = record_capacity
        records = tuple(
            Replica(
                replica_id=spec.replica_id, url=f"virtual://{spec.replica_id}", model=MODEL,
                pool=f"{spec.site}-{spec.generation.value.lower()}", site=spec.site,
                generation=spec.generation, engine=EngineKind.SIM,
                capacity_prior_tokens_per_s=spec.prior_tokens_per_s,
            )
            for spec in replicas
        )  # fmt: skip
        self.table = RoutingTable(version=1, replicas=records)
        self.state = FleetState()
        self.state.sync(self.table)
        extra = {} if prompt_to_output is None else {"prompt_to_output": prompt_to_output}
        self.estimator = CapacityEstimator(
            target_ttft_s=target_ttft_s, target_tpot_s=target_tpot_s, **extra
        )
        costs: dict[str, PrecomputedStepCost] = {}  # one per pool, so pools upgrade alone
        for r in records:
            if r.pool not in costs:
                costs[r.pool] = PrecomputedStepCost(StepCostModel.for_generation(r.generation))
        self._costs = costs
        self.engines = {r.replica_id: _Engine(r, SimBatcher(costs[r.pool])) for r in records}
        self._heap: list[tuple[float, int, int, _Engine | None]] = []
        self._order = itertools.count()
        self._ttfts = LatencyRecord()  # bounded: a long run's memory does not grow with it
        self._tpots = LatencyRecord()
        self._measure_from_s = 0.0
        self._in_flight = 0
        self._finished = 0
        self._steps = 0
        self._last_finish_s = 0.0
        self._stop = False

    def speed_up(self, pool: str, factor: float) -> None:
        """Make every engine of `pool` `factor`× faster from now on (from `on_scrape`: a software
        upgrade mid-run); the router is not told, it has to learn it."""
        self._costs[pool].speed_up(factor)

    def stop(self) -> None:
        """End the run at the current event (from `on_scrape`: an overloaded probe, say)."""
        self._stop = True

    @property
    def waiting(self) -> int:
        """Requests queued inside the engines, not yet admitted to a batch."""
        return sum(e.batcher.num_waiting for e in self.engines.values())

    @property
    def generated_tokens(self) -> int:
        """Output tokens the engines have generated so far (finished requests or not)."""
        return sum(e.generated for e in self.engines.values())

    def run(
        self,
        arrivals: Iterable[Arrival],
        *,
        until_s: float | None = None,
        on_scrape: Callable[[float, VirtualFleet], None] | None = None,
        window: int | None = None,
        window_ramp_s: float = 0.0,
        measure_from_s: float = 0.0,
    ) -> FleetRun:
        """Serve `arrivals` until all have finished, or stop at `until_s`.

        `arrivals` is consumed as it is due (a generator is read lazily, never stored).
        Open loop (`window` None): each arrives at its `at_s` (sorted by time). Closed loop: the
        client keeps `window` requests in flight and sends the next, in order, the moment one
        finishes; `at_s` is ignored. The window opens linearly over `window_ramp_s` (a slow
        start, so the first scrapes can show what each replica sustains before it is filled).
        Latencies count for requests arriving from `measure_from_s`.
        """
        if window is not None and window < 1:
            raise ValueError("window must be at least 1")
        end = until_s if until_s is not None else float("inf")
        self._measure_from_s = measure_from_s
        samples: list[CapacitySample] = []
        source = iter(arrivals)
        upcoming = next(source, None)  # the next arrival not yet routed
        heap = self._heap
        next_scrape = SCRAPE_INTERVAL_S
        now = 0.0
        while True:
            if window is None:
                next_arrival = upcoming.at_s if upcoming is not None else float("inf")
            elif upcoming is None:
                next_arrival = float("inf")
            elif window_ramp_s > 0 and now < window_ramp_s:
                opens_at = (self._in_flight + 1) / window * window_ramp_s
                next_arrival = max(now, opens_at) if opens_at < window_ramp_s else now
                if self._in_flight >= window:
                    next_arrival = float("inf")
            else:
                next_arrival = now if self._in_flight < window else float("inf")
            next_step = heap[0][0] if heap else float("inf")
            if upcoming is None and not heap:
                break
            now = min(next_arrival, next_scrape, next_step)
            if now > end or self._stop:
                break
            if next_step <= now:
                # Open loop: arrivals and scrapes stay put while steps finish. Closed loop: a
                # finish may open the window, so only the steps due now (they go first anyway).
                limit = min(next_arrival, next_scrape, end) if window is None else now
                now = self._run_steps(now, limit)
            elif next_scrape <= now:
                self._scrape(now)
                if self.record_capacity:
                    samples.append(CapacitySample(now, self._capacities()))
                if on_scrape is not None:
                    on_scrape(now, self)
                next_scrape += SCRAPE_INTERVAL_S
            else:
                assert upcoming is not None
                self._route(upcoming, now)
                upcoming = next(source, None)
        return FleetRun(
            output_tokens={rid: e.output_tokens for rid, e in self.engines.items()},
            requests={rid: e.requests for rid, e in self.engines.items()},
            capacity=samples,
            generation_of={rid: e.replica.generation for rid, e in self.engines.items()},
            pool_of={rid: e.replica.pool for rid, e in self.engines.items()},
            ttfts_s=self._ttfts,
            tpots_s=self._tpots,
            end_s=min(now, end) if upcoming is not None or heap else self._last_finish_s,
            finished=self._finished,
            first_tokens=self._ttfts.count,
            steps=self._steps,
        )

    def _run_steps(self, now: float, limit: float) -> float:
        """Finish every step due up to `limit` in time order; the last one's time.

        What the main loop would do event by event, without its bookkeeping in between. An
        engine's next step replaces its finished one on the heap (one sift, not two); a
        decode-only step, most of them, is finished here without a further call.
        """
        heap, order, finish_full_step = self._heap, self._order, self._finish_full_step
        replace, pop = heapq.heapreplace, heapq.heappop
        steps = 0
        while True:
            steps += 1
            engine: _Engine = heap[0][3]  # type: ignore[assignment]
            batcher = engine.batcher
            sequences = batcher.planned_decode_only_sequences
            if sequences:  # no first tokens, no prompt computed
                engine.generated += sequences
                finished, duration = batcher.finish_decode_step_and_plan(now)
                if finished:
                    self._account_finished(engine, finished, now)
            else:
                duration = finish_full_step(engine, now)
            if duration >= 0.0:
                replace(heap, (now + duration, _STEP, next(order), engine))
            else:
                engine.busy = False
                pop(heap)
            if not heap or heap[0][0] > limit:
                self._steps += steps
                return now
            now = heap[0][0]

    def _capacities(self) -> dict[str, float]:
        out = {}
        for rid in self.engines:
            stats = self.state.stats(rid)
            if stats is not None:
                out[rid] = stats.capacity_tokens_per_s
        return out

    def _route(self, arrival: Arrival, now: float) -> None:
        ctx = RequestContext(
            model=MODEL, prompt_tokens=arrival.prompt_tokens, max_tokens=arrival.output_tokens
        )
        view = RoutingView(
            self.table, self.target_ttft_s, self.target_tpot_s, now, self.state.reservation
        )
        decision = self.profile.decide(ctx, view, self.state.candidates(self.table))
        engine = self.engines[decision.primary.replica_id]
        request = SimRequest(arrival.prompt_tokens, arrival.output_tokens, now)
        engine.batcher.submit(request)
        if self.keep_requests:
            engine.requests.append(request)
        self.state.started(engine.replica)
        self._in_flight += 1
        if not engine.busy:
            self._plan(engine, now)

    def _plan(self, engine: _Engine, now: float) -> None:
        duration = engine.batcher.plan_duration_s()
        engine.busy = True
        heapq.heappush(self._heap, (now + duration, _STEP, next(self._order), engine))

    def _finish_full_step(self, engine: _Engine, now: float) -> float:
        """Finish `engine`'s step that admitted, prefilled or preempted; its next step's
        duration, or -1.0 when it has no work left."""
        batcher = engine.batcher
        outcome = batcher.finish_step(now)
        engine.generated += outcome.tokens_generated
        engine.prompted += outcome.prompt_tokens_computed
        measure_from = self._measure_from_s
        for request in outcome.first_tokens:
            if request.arrival_s >= measure_from:
                self._ttfts.add(now - request.arrival_s)
        if outcome.finished:
            self._account_finished(engine, outcome.finished, now)
        return batcher.plan_duration_s() if batcher.has_work else -1.0

    def _account_finished(self, engine: _Engine, finished: list[SimRequest], now: float) -> None:
        measure_from = self._measure_from_s
        for request in finished:
            engine.output_tokens += request.output_tokens
            first = request.first_token_s
            tpot = (
                (now - first) / (request.output_tokens - 1)
                if first is not None and request.output_tokens > 1
                else None
            )
            if tpot is not None and request.arrival_s >= measure_from:
                self._tpots.add(tpot)
            self.state.finished(
                engine.replica, ok=True, output_tokens=request.output_tokens, tpot_s=tpot
            )
            self._in_flight -= 1
            self._finished += 1
            self._last_finish_s = now

    def _scrape(self, now: float) -> None:
        for replica_id, engine in self.engines.items():
            b = engine.batcher
            load = ReplicaLoad(
                b.num_running, b.num_waiting, b.kv_usage, engine.prompted, engine.generated, now
            )
            stats = self.state.reported(replica_id, load, now_s=now, stale_after_s=math.inf)
            if stats is not None:
                self.estimator.update(replica_id, stats, load, now)


def poisson_arrivals(
    rate_per_s: float,
    duration_s: float,
    lengths: Callable[[], tuple[int, int]],
    draw_gap: Callable[[float], float],
) -> list[Arrival]:
    """Arrivals at `rate_per_s` for `duration_s`; `lengths()` gives (prompt, output) tokens."""
    out: list[Arrival] = []
    now = 0.0
    while True:
        now += draw_gap(rate_per_s)
        if now > duration_s:
            return out
        prompt, output = lengths()
        out.append(Arrival(now, prompt, output))
