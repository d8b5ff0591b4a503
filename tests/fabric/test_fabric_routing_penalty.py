"""What node health does to routing in the default `capacity` profile: an UNHEALTHY node's replica
gets nothing, a DEGRADED one about `degradedCapacityFactor` (0.5) of a healthy one's share, and
when every node is unhealthy the soft filter narrows nothing (degraded service beats none)."""

from __future__ import annotations

from collections import Counter, deque

from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, NodeHealth, Replica, Site
from orchestrator.routing.context import RequestContext
from orchestrator.routing.fleet_state import FleetState
from orchestrator.routing.plugin import RoutingView
from orchestrator.routing.profiles import builtin_profiles
from orchestrator.routing.signals import DEFAULT_DEGRADED_CAPACITY_FACTOR
from orchestrator.table.snapshot import RoutingTable

MODEL = "openai/gpt-oss-120b"


def mi355x(name: str, health: NodeHealth) -> Replica:
    return Replica(
        replica_id=name, url=f"http://{name}:8000", model=MODEL, pool="us-mi355x", site="us",
        generation=Generation.MI355X, engine=EngineKind.SIM, capacity_prior_tokens_per_s=1600.0,
        node=f"node-{name}", node_health=health,
    )  # fmt: skip


def route(replicas: list[Replica], decisions: int = 20_000, lasting: int = 200) -> Counter[str]:
    """Route requests in sequence, each holding its replica for `lasting` decisions."""
    table = RoutingTable(1, tuple(replicas), {"us": Site("us")})
    fleet = FleetState()
    fleet.sync(table)
    candidates = fleet.candidates(table)
    profile = builtin_profiles()["capacity"]
    running: deque[Replica] = deque()
    counts: Counter[str] = Counter()
    for index in range(decisions):
        ctx = RequestContext(model=MODEL, prompt_tokens=500, prefix_hash=None)
        decision = profile.decide(ctx, RoutingView(table, 3.0, 0.08, index * 0.001), candidates)
        fleet.started(decision.primary)
        running.append(decision.primary)
        if len(running) > lasting:
            fleet.finished(running.popleft(), ok=True, output_tokens=100, tpot_s=None)
        if index >= lasting:
            counts[decision.primary.replica_id] += 1
    return counts


def test_unhealthy_gets_nothing_and_degraded_gets_its_penalty_share() -> None:
    counts = route(
        [
            mi355x("a", NodeHealth.HEALTHY),
            mi355x("b", NodeHealth.HEALTHY),
            mi355x("c", NodeHealth.DEGRADED),
            mi355x("d", NodeHealth.UNHEALTHY),
        ]
    )
    assert counts["d"] == 0
    healthy = (counts["a"] + counts["b"]) / 2
    share = counts["c"] / healthy
    assert abs(share - DEFAULT_DEGRADED_CAPACITY_FACTOR) < 0.15, counts


def test_when_every_node_is_unhealthy_the_soft_filter_still_routes() -> None:
    counts = route([mi355x("a", NodeHealth.UNHEALTHY), mi355x("b", NodeHealth.UNHEALTHY)], 2_000)
    assert counts["a"] > 0 and counts["b"] > 0
