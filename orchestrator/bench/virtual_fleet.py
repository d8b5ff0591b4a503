"""A fleet in virtual time: simulated replicas behind the real routing profile and estimator.

No sockets and no sleeping. Requests arrive on a schedule; each goes where the profile decides,
using the same `FleetState`, plugins and `CapacityEstimator` the router runs; every replica is a
`SimBatcher` on the fleet model; replicas are "scraped" once a second of simulated time. What
comes out is per-replica output tokens, latencies and the estimator's capacity over time.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, Replica, ReplicaLoad
from orchestrator.fleet.step_cost import StepCostModel
from orchestrator.routing.context import RequestContext
from orchestrator.routing.estimator import CapacityEstimator
from orchestrator.routing.fleet_state import FleetState
from orchestrator.routing.plugin import RoutingView
from orchestrator.routing.profile import Profile
from orchestrator.sim.batcher import SimBatcher, SimRequest
from orchestrator.table.snapshot import RoutingTable

MODEL = "openai/gpt-oss-120b"
SCRAPE_INTERVAL_S = 1.0


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
    clock_s: float = 0.0
    step_end_s: float | None = None
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
    """Per replica: output tokens and finished requests; capacity estimates every scrape."""

    output_tokens: dict[str, int]
    requests: dict[str, list[SimRequest]]
    capacity: list[CapacitySample]
    generation_of: dict[str, Generation]

    def share(self, replica_id: str) -> float:
        total = sum(self.output_tokens.values())
        return self.output_tokens[replica_id] / total if total else 0.0


class VirtualFleet:
    """Replicas, one profile and one estimator, stepping through simulated time."""

    def __init__(
        self,
        replicas: Sequence[ReplicaSpec],
        profile: Profile,
        *,
        target_ttft_s: float = 3.0,
        target_tpot_s: float = 0.080,
        prompt_to_output: float | None = None,
    ) -> None:
        self.profile = profile
        self.target_ttft_s = target_ttft_s
        self.target_tpot_s = target_tpot_s
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
        self.engines = {
            r.replica_id: _Engine(r, SimBatcher(StepCostModel.for_generation(r.generation)))
            for r in records
        }

    def run(
        self,
        arrivals: Sequence[Arrival],
        *,
        until_s: float | None = None,
        on_scrape: Callable[[float, VirtualFleet], None] | None = None,
    ) -> FleetRun:
        """Serve `arrivals` (sorted by time); stop at `until_s` or when all have finished."""
        end = until_s if until_s is not None else float("inf")
        samples: list[CapacitySample] = []
        pending = list(arrivals)
        index, next_scrape = 0, SCRAPE_INTERVAL_S
        while True:
            next_arrival = pending[index].at_s if index < len(pending) else float("inf")
            now = min(next_arrival, next_scrape)
            busy = any(e.batcher.has_work for e in self.engines.values())
            if now > end or (now == float("inf")) or (index >= len(pending) and not busy):
                break
            for engine in self.engines.values():
                self._advance(engine, now)
            if now == next_scrape:
                self._scrape(now)
                samples.append(
                    CapacitySample(
                        now,
                        {
                            rid: self.state.stats(rid).capacity_tokens_per_s  # type: ignore[union-attr]
                            for rid in self.engines
                        },
                    )
                )
                if on_scrape is not None:
                    on_scrape(now, self)
                next_scrape += SCRAPE_INTERVAL_S
                continue
            self._route(pending[index], now)
            index += 1
        return FleetRun(
            output_tokens={rid: e.output_tokens for rid, e in self.engines.items()},
            requests={rid: e.requests for rid, e in self.engines.items()},
            capacity=samples,
            generation_of={rid: e.replica.generation for rid, e in self.engines.items()},
        )

    def _route(self, arrival: Arrival, now: float) -> None:
        ctx = RequestContext(
            model=MODEL, prompt_tokens=arrival.prompt_tokens, max_tokens=arrival.output_tokens
        )
        view = RoutingView(self.table, self.target_ttft_s, self.target_tpot_s, now)
        decision = self.profile.decide(ctx, view, self.state.candidates(self.table))
        engine = self.engines[decision.primary.replica_id]
        if not engine.batcher.has_work:
            engine.clock_s = now
        request = SimRequest(arrival.prompt_tokens, arrival.output_tokens, now)
        engine.batcher.submit(request)
        engine.requests.append(request)
        self.state.started(engine.replica)

    def _advance(self, engine: _Engine, until_s: float) -> None:
        batcher = engine.batcher
        while batcher.has_work:
            if engine.step_end_s is None:
                engine.step_end_s = engine.clock_s + batcher.plan_step().duration_s
            if engine.step_end_s > until_s:
                return
            engine.clock_s, engine.step_end_s = engine.step_end_s, None
            outcome = batcher.finish_step(engine.clock_s)
            engine.generated += outcome.tokens_generated
            engine.prompted += outcome.prompt_tokens_computed
            for request in outcome.finished:
                engine.output_tokens += request.output_tokens
                tpot = (
                    (engine.clock_s - request.first_token_s) / (request.output_tokens - 1)
                    if request.first_token_s is not None and request.output_tokens > 1
                    else None
                )
                self.state.finished(
                    engine.replica, ok=True, output_tokens=request.output_tokens, tpot_s=tpot
                )
        engine.clock_s = max(engine.clock_s, until_s)

    def _scrape(self, now: float) -> None:
        for replica_id, engine in self.engines.items():
            b = engine.batcher
            load = ReplicaLoad(
                b.num_running, b.num_waiting, b.kv_usage, engine.prompted, engine.generated, now
            )
            self.state.scraped(replica_id, load)
            stats = self.state.stats(replica_id)
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
    for _ in itertools.count():
        now += draw_gap(rate_per_s)
        if now > duration_s:
            return out
        prompt, output = lengths()
        out.append(Arrival(now, prompt, output))
    return out
