"""Load reports in the router: other routers' requests are fixed at each report and this router's
own sends add on top; a stale or unreadable load is unknown, never idle."""

from __future__ import annotations

import math

from routing_fleet import replica, request, table, view

from orchestrator.core.generations import Generation
from orchestrator.core.records import Replica, ReplicaLoad, ReplicaState
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


def _turned_over(replicas: list[Replica], others: dict[str, int]) -> dict[str, int]:
    """One request of ours on each replica at a scrape that showed `others` beside it; every one of
    ours has finished since: the others each replica reads then."""
    clock = _Clock()
    fleet = FleetState(clock=clock)
    fleet.sync(table(replicas))
    for target in replicas:
        fleet.started(target)
    clock.now_s = 1.0
    for target in replicas:
        load = busy(1 + others[target.replica_id], at_s=1.0)
        fleet.reported(target.replica_id, load, now_s=1.0)
    fleet.reports_taken(1.0)
    clock.now_s = 2.0
    for target in replicas:
        fleet.finished(target, ok=True, output_tokens=1, tpot_s=None)
    return {r.replica_id: fleet.stats(r.replica_id).others_in_flight() for r in replicas}  # type: ignore[union-attr]


def test_other_routers_load_moves_only_between_replicas_of_its_own_model() -> None:
    """Model A's replicas each ran 10 of other routers' requests, model B's none: B's stay idle
    (a request for A never moves to B), and A's keep theirs."""
    replicas = [replica(f"a{i}", model="model-a") for i in range(4)]
    replicas += [replica(f"b{i}", model="model-b") for i in range(4)]
    others = {r.replica_id: 10 if r.model == "model-a" else 0 for r in replicas}
    assert _turned_over(replicas, others) == others


def test_other_routers_load_moves_toward_each_replicas_capacity_share() -> None:
    """Others already in proportion to capacity (an MI355X runs about 4.6 times an MI300X) are
    where the other routers would send them: nothing moves. Skewed the other way, they move to
    the capacity shares."""
    fast, slow = replica("fast", Generation.MI355X), replica("slow", Generation.MI300X)
    assert _turned_over([fast, slow], {"fast": 16, "slow": 4}) == {"fast": 16, "slow": 4}
    total = fast.capacity_prior_tokens_per_s + slow.capacity_prior_tokens_per_s
    fast_share = round(20 * fast.capacity_prior_tokens_per_s / total)
    moved = _turned_over([fast, slow], {"fast": 4, "slow": 16})
    assert moved == {"fast": fast_share, "slow": 20 - fast_share}


def test_other_routers_load_on_a_replica_that_is_not_ready_stays_its_own() -> None:
    """A draining replica takes no new requests: its others neither spread nor draw any."""
    replicas = [replica(f"r{i}") for i in range(3)]
    replicas.append(replica("draining", state=ReplicaState.DRAINING))
    others = {"r0": 9, "r1": 0, "r2": 0, "draining": 6}
    assert _turned_over(replicas, others) == {"r0": 3, "r1": 3, "r2": 3, "draining": 6}


def test_a_stale_or_unreadable_load_neither_counts_in_the_shares_nor_is_moved() -> None:
    """Four replicas, other routers' 8 on `a`: `stale` (20 others, read long before) and `broken`
    (its page now an adapter error) stay out of the shares, so the 8 spread over the four alone;
    once the four go stale too, finishing requests moves nothing (unknown is not idle)."""
    clock = _Clock()
    fleet = FleetState(clock=clock)
    ids = ["a", "b", "c", "d", "stale", "broken"]
    replicas = [replica(i) for i in ids]
    fleet.sync(table(replicas))
    for target in replicas:
        fleet.started(target)
    clock.now_s = 1.0
    fleet.reported("stale", busy(21, at_s=0.2), now_s=1.0, stale_after_s=0.5)
    fleet.reported("broken", busy(21, at_s=1.0), now_s=1.0)
    fleet.reported("broken", None, now_s=1.0, problem="unreadable page")
    for target in replicas[:4]:
        running = 9 if target.replica_id == "a" else 1
        fleet.reported(target.replica_id, busy(running, at_s=1.0), now_s=1.0, stale_after_s=2.0)
    fleet.reports_taken(1.0)

    def others() -> dict[str, int]:
        return {i: fleet.stats(i).others_in_flight() for i in ids}  # type: ignore[union-attr]

    for target in replicas[:3]:  # half of ours in flight at the scrape finish
        fleet.finished(target, ok=True, output_tokens=1, tpot_s=None)
    assert others() == {"a": 5, "b": 1, "c": 1, "d": 1, "stale": 20, "broken": 20}
    clock.now_s = 3.5  # the four's loads are stale now
    for target in replicas[3:]:
        fleet.finished(target, ok=True, output_tokens=1, tpot_s=None)
    assert others() == {"a": 5, "b": 1, "c": 1, "d": 1, "stale": 20, "broken": 20}


def _eight_others_on_a() -> tuple[_Clock, FleetState, list[Replica]]:
    """Replicas `a` and `b`, two of this router's requests on each, and a report at 1 s that
    shows other routers' 8 more on `a`."""
    clock = _Clock()
    fleet = FleetState(clock=clock)
    replicas = [replica(i) for i in ("a", "b")]
    fleet.sync(table(replicas))
    for target in replicas * 2:
        fleet.started(target)
    clock.now_s = 1.0
    fleet.reported("a", busy(2 + 8, at_s=1.0), now_s=1.0)
    fleet.reported("b", busy(2, at_s=1.0), now_s=1.0)
    fleet.reports_taken(1.0)
    return clock, fleet, replicas


def _others(fleet: FleetState) -> tuple[int, int]:
    return fleet.stats("a").others_in_flight(), fleet.stats("b").others_in_flight()  # type: ignore[union-attr]


def test_only_requests_in_flight_at_the_scrape_count_as_turned_over_when_they_finish() -> None:
    """Requests sent after the scrape that end at once (a refused connection, a quick 4xx) say
    nothing of how far other routers' requests have moved on: the skew stays until the four that
    were in flight at the scrape finish."""
    clock, fleet, replicas = _eight_others_on_a()

    clock.now_s = 1.5
    for target in replicas * 4:
        fleet.started(target)
        fleet.finished(target, ok=False, output_tokens=0, tpot_s=None, started_s=1.5)
    assert _others(fleet) == (8, 0)
    for target in replicas * 2:
        fleet.finished(target, ok=True, output_tokens=1, tpot_s=None, started_s=0.0)
    assert _others(fleet) == (4, 4)


def test_once_no_report_shows_other_routers_load_finishing_requests_moves_nothing() -> None:
    """Other routers' 8 on `a`, then they stop: the next batch shows none anywhere, and the skew
    of the batch before is not applied again as this router's requests finish (what the router
    alone reads: its own in-flight, no others)."""
    clock, fleet, replicas = _eight_others_on_a()
    clock.now_s = 2.0
    for target in replicas:
        fleet.reported(target.replica_id, busy(2, at_s=2.0), now_s=2.0)
    fleet.reports_taken(2.0)

    assert _others(fleet) == (0, 0)
    for target in replicas * 2:
        fleet.finished(target, ok=True, output_tokens=1, tpot_s=None, started_s=0.0)
    assert _others(fleet) == (0, 0)
