"""Load reports in the router: other routers' requests are fixed at each report and this router's
own sends add on top; a stale or unreadable load is unknown, never idle."""

from __future__ import annotations

import math

from routing_fleet import replica, request, table, view

from orchestrator.core.generations import Generation
from orchestrator.core.records import ReplicaLoad
from orchestrator.routing.fleet_state import FleetState
from orchestrator.routing.plugins.filters.load_known import LoadKnownFilter
from orchestrator.routing.profiles import builtin_profiles
from orchestrator.routing.signals import outstanding
from orchestrator.table.snapshot import RoutingTable


def busy(running: int, at_s: float) -> ReplicaLoad:
    return ReplicaLoad(running=running, waiting=0, kv_cache_usage=0.1, observed_at_s=at_s)


def fleet_of(*ids: str) -> tuple[FleetState, RoutingTable]:
    fleet = FleetState()
    routing_table = table(replica(i, Generation.MI355X) for i in ids)
    fleet.sync(routing_table)
    return fleet, routing_table


def test_what_this_router_sends_after_a_report_adds_to_what_other_routers_had() -> None:
    fleet, routing_table = fleet_of("a")
    target = routing_table.replica("a")
    assert target is not None
    for _ in range(2):
        fleet.started(target)
    fleet.reported("a", busy(running=5, at_s=10.0), now_s=10.0)  # 2 ours + 3 from others
    for _ in range(4):
        fleet.started(target)  # after the report: not in its 5
    [candidate] = fleet.candidates(routing_table)

    assert candidate.stats.others_in_flight() == 3
    assert outstanding(candidate) == 6 + 3


def test_a_load_older_than_the_bound_or_unreadable_is_unknown_and_a_new_replica_is_kept() -> None:
    fleet, routing_table = fleet_of("fresh", "stale", "unreadable", "new")
    fleet.reported("fresh", busy(1, at_s=9.5), now_s=9.5, stale_after_s=3.0)
    fleet.reported("stale", busy(1, at_s=6.0), now_s=6.0, stale_after_s=3.0)
    fleet.reported("unreadable", busy(1, at_s=9.5), now_s=9.5)
    fleet.reported("unreadable", None, now_s=9.6, problem="metrics page lacks ...")
    candidates = fleet.candidates(routing_table)

    kept = LoadKnownFilter().filter(request(), view(routing_table, now_s=10.0), candidates)

    assert [c.replica.replica_id for c in kept] == ["fresh", "new"]
    stale = fleet.stats("stale")
    assert stale is not None and stale.others_in_flight() == 1  # its last figure, not zero
    unreadable = fleet.stats("unreadable")
    assert unreadable is not None and unreadable.load is None
    assert unreadable.load_known_until_s == -math.inf


def test_when_every_load_is_stale_the_capacity_profile_still_routes() -> None:
    """The control plane gone for a while: routers go on from their own in-flight."""
    fleet, routing_table = fleet_of("a", "b")
    for replica_id in ("a", "b"):
        fleet.reported(replica_id, busy(1, at_s=0.0), now_s=0.0, stale_after_s=3.0)
    profile = builtin_profiles()["capacity"]

    decision = profile.decide(
        request(), view(routing_table, now_s=60.0), fleet.candidates(routing_table)
    )

    assert decision.primary.replica_id in {"a", "b"}


def test_a_replica_with_a_fresh_load_is_preferred_over_one_whose_load_went_stale() -> None:
    fleet, routing_table = fleet_of("stale-idle", "fresh-busy")
    fleet.reported("stale-idle", busy(0, at_s=0.0), now_s=0.0, stale_after_s=3.0)
    fleet.reported("fresh-busy", busy(40, at_s=9.8), now_s=9.8, stale_after_s=3.0)
    profile = builtin_profiles()["capacity"]

    decision = profile.decide(
        request(), view(routing_table, now_s=10.0), fleet.candidates(routing_table)
    )

    assert decision.primary.replica_id == "fresh-busy"
