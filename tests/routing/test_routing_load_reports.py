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


class _Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def test_a_report_scraped_before_this_routers_last_sends_counts_them_as_its_own() -> None:
    """Scraped at 10.0 with 2 of ours running; 3 more sent at 10.5 and read at 11.0: others are
    the 3 the engine had beyond ours then, not 5 - 5 = 0."""
    clock = _Clock()
    fleet = FleetState(clock=clock)
    routing_table = table([replica("a", Generation.MI355X)])
    fleet.sync(routing_table)
    target = routing_table.replica("a")
    assert target is not None
    clock.now_s = 9.0
    for _ in range(2):
        fleet.started(target)
    clock.now_s = 10.5
    for _ in range(3):
        fleet.started(target)
    clock.now_s = 11.0
    fleet.reported("a", busy(running=5, at_s=10.0), now_s=11.0)

    stats = fleet.stats("a")
    assert stats is not None and stats.others_in_flight() == 3 and stats.in_flight == 5


def test_other_routers_load_moves_to_the_mean_as_this_routers_requests_turn_over() -> None:
    """Four replicas, other routers reported 8 on one and 0 elsewhere: once half of what this
    router had in flight at the scrape has finished, half the skew is taken to have moved on; once
    all of it has, none. A router whose reports show no others is left as it is."""
    clock = _Clock()
    fleet = FleetState(clock=clock)
    ids = ["a", "b", "c", "d"]
    routing_table = table(replica(i, Generation.MI355X) for i in ids)
    fleet.sync(routing_table)
    replicas = [r for r in routing_table.replicas]
    for target in replicas:
        for _ in range(2):
            fleet.started(target)  # 8 of ours in flight at the scrape
    clock.now_s = 1.0
    for target in replicas:
        running = 2 + (8 if target.replica_id == "a" else 0)
        fleet.reported(target.replica_id, busy(running, at_s=1.0), now_s=1.0)
    fleet.reports_taken(1.0)
    others = {i: fleet.stats(i).others_in_flight() for i in ids}  # type: ignore[union-attr]
    assert others == {"a": 8, "b": 0, "c": 0, "d": 0}

    for target in replicas:  # half of ours finish
        fleet.finished(target, ok=True, output_tokens=1, tpot_s=None)
    others = {i: fleet.stats(i).others_in_flight() for i in ids}  # type: ignore[union-attr]
    assert others == {"a": 5, "b": 1, "c": 1, "d": 1}  # mean 2, skew halved

    for target in replicas:
        fleet.finished(target, ok=True, output_tokens=1, tpot_s=None)
    others = {i: fleet.stats(i).others_in_flight() for i in ids}  # type: ignore[union-attr]
    assert others == {"a": 2, "b": 2, "c": 2, "d": 2}
