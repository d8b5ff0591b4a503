"""Small real fleets for routing tests: replicas, tables, candidates and a request simulator."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence

from orchestrator.core.generations import Generation
from orchestrator.core.records import (
    EngineKind,
    NodeHealth,
    Replica,
    ReplicaLoad,
    ReplicaState,
    Site,
)
from orchestrator.fleet.figures import capacity_prior_tokens_per_s, load_figures
from orchestrator.routing.context import RequestContext
from orchestrator.routing.fleet_state import FleetState
from orchestrator.routing.plugin import Candidate, RoutingView
from orchestrator.routing.profile import Profile
from orchestrator.routing.stats import ReplicaStats
from orchestrator.table.snapshot import RoutingTable

MODEL = "openai/gpt-oss-120b"
TARGET_TTFT_S = 3.0
TARGET_TPOT_S = 0.08
RTT_S = 0.15


def capacity(generation: Generation) -> float:
    """The router's prior for one replica of `generation`, output tokens/s."""
    return capacity_prior_tokens_per_s(load_figures(), generation)


def replica(
    replica_id: str,
    generation: Generation = Generation.MI300X,
    *,
    site: str = "kr",
    model: str = MODEL,
    state: ReplicaState = ReplicaState.READY,
    node_health: NodeHealth = NodeHealth.HEALTHY,
    static_weight: float = 1.0,
    pool: str | None = None,
) -> Replica:
    return Replica(
        replica_id=replica_id,
        url=f"http://{replica_id}:8000",
        model=model,
        pool=pool or f"{site}-{generation.value.lower()}",
        site=site,
        generation=generation,
        engine=EngineKind.SIM,
        capacity_prior_tokens_per_s=capacity(generation),
        state=state,
        node_health=node_health,
        static_weight=static_weight,
    )


def candidate(
    replica_: Replica,
    *,
    in_flight: int = 0,
    load: ReplicaLoad | None = None,
    ttft_s: float | None = None,
    tpot_s: float | None = None,
    circuit_open: bool = False,
) -> Candidate:
    stats = ReplicaStats(replica_.capacity_prior_tokens_per_s, in_flight=in_flight, load=load)
    if load is not None:  # as `FleetState.reported` fixes it when the report arrives
        stats.others = max(0, load.running + load.waiting - in_flight)
    stats.ttft_s, stats.tpot_s, stats.circuit_open = ttft_s, tpot_s, circuit_open
    return Candidate(replica_, stats)


def table(replicas: Iterable[Replica], *, version: int = 1) -> RoutingTable:
    sites = {"kr": Site("kr", {"us": RTT_S}), "us": Site("us", {"kr": RTT_S})}
    return RoutingTable(version=version, replicas=tuple(replicas), sites=sites)


def view(table_: RoutingTable | None = None, *, now_s: float = 0.0) -> RoutingView:
    return RoutingView(table_ or table(()), TARGET_TTFT_S, TARGET_TPOT_S, now_s)


def request(
    *, model: str = MODEL, prefix_hash: int | None = None, client_site: str | None = None
) -> RequestContext:
    return RequestContext(
        model=model, prompt_tokens=1000, prefix_hash=prefix_hash, client_site=client_site
    )


def mixed_fleet(per_generation: int) -> list[Replica]:
    """`per_generation` MI300X and as many MI355X, alternating, over two sites."""
    out = []
    for index in range(2 * per_generation):
        generation = (Generation.MI300X, Generation.MI355X)[index % 2]
        site = ("kr", "us")[(index // 2) % 2]
        out.append(replica(f"{site}-{generation.value.lower()}-{index:04d}", generation, site=site))
    return out


def simulate(
    profile: Profile,
    table_: RoutingTable,
    *,
    decisions: int,
    lasting: int,
    requests: Callable[[int], RequestContext] = lambda _: request(),
    step_s: float = 0.001,
    fleet: FleetState | None = None,
) -> Counter[str]:
    """Route `decisions` requests in sequence; each holds its replica for `lasting` decisions.

    Requests are counted once the fleet holds `lasting` of them (steady state). The forwarder's
    bookkeeping is the real one (`FleetState.started`/`finished`).
    """
    fleet = fleet or FleetState()
    fleet.sync(table_)
    candidates = fleet.candidates(table_)
    running: deque[Replica] = deque()
    counts: Counter[str] = Counter()
    for index in range(decisions):
        decision = profile.decide(requests(index), view(table_, now_s=index * step_s), candidates)
        fleet.started(decision.primary)
        running.append(decision.primary)
        if len(running) > lasting:
            fleet.finished(running.popleft(), ok=True, output_tokens=100, tpot_s=None)
        if index >= lasting:
            counts[decision.primary.replica_id] += 1
    return counts


def share_ratio(counts: Counter[str], replicas: Sequence[Replica]) -> float:
    """Requests per MI355X replica over requests per MI300X replica."""
    per: dict[Generation, list[int]] = {Generation.MI300X: [], Generation.MI355X: []}
    for r in replicas:
        per[r.generation].append(counts[r.replica_id])
    mean = {g: sum(v) / len(v) for g, v in per.items()}
    return mean[Generation.MI355X] / mean[Generation.MI300X]
