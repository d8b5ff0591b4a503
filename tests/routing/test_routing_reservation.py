"""Room on the fast replicas is held for the tightest TPOT target in flight: the fastest
replicas that hold the tight class's requests are kept at the tight batch, loose work soaks up
the rest of the fleet, and nothing is reserved while only one target is in flight."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest
from routing_fleet import replica, request, table, view

from orchestrator.core.generations import Generation
from orchestrator.core.records import ReplicaLoad, ReplicaState
from orchestrator.routing.fleet_state import FleetState
from orchestrator.routing.plugin import Candidate, RoutingView
from orchestrator.routing.plugins.filters.slo_reserved import SloReservedFilter
from orchestrator.routing.profiles import builtin_profiles
from orchestrator.routing.reservation import claims, demand_moved, reserved_replicas, tight_need
from orchestrator.routing.signals import utilisations

TIGHT, LOOSE = 0.014, 0.03


def test_the_largest_tight_capacities_are_reserved_until_they_hold_the_demand_with_margin() -> None:
    capacities = [2.0, 147.0, 2.0, 140.0]
    assert reserved_replicas(capacities, 0) == []
    assert reserved_replicas(capacities, 60) == [1]  # 60 in flight + 1 ≤ 147
    assert reserved_replicas(capacities, 150) == [1, 3]
    assert sorted(reserved_replicas(capacities, 1_000)) == [0, 1, 2, 3]  # all, and still short
    assert reserved_replicas(capacities, 60, held=[3]) == [3]  # a held replica stays held
    assert reserved_replicas(capacities, 150, held=[0]) == [0, 1, 3]
    assert not demand_moved(60.5, 60) and not demand_moved(65, 60)
    assert demand_moved(67, 60) and demand_moved(2.5, 1)


def test_tight_work_among_loose_work_reserves_the_fast_replica_and_loose_work_goes_elsewhere() -> (
    None
):
    fleet, candidates = _two_fast_and_a_slow()
    fast_0, _, slow = (c.replica for c in candidates)
    fleet.started(fast_0, TIGHT)
    assert all(c.stats.reserved_tpot_s == float("inf") for c in candidates)  # one target only
    for _ in range(3):
        fleet.started(slow, LOOSE)
    reserved = [c for c in candidates if c.stats.reserved_tpot_s == TIGHT]
    assert len(reserved) == 1 and reserved[0].replica.generation is Generation.MI355X
    # a loose request sees the reserved replica at its tight batch, the other fast one at its own
    rho = dict(zip(("fast-0", "fast-1", "slow"), utilisations(candidates, LOOSE), strict=True))
    held = reserved[0].replica.replica_id
    free = "fast-1" if held == "fast-0" else "fast-0"
    assert rho[free] < rho[held]
    # the loose work leaves: one target in flight again, nothing reserved
    for _ in range(3):
        fleet.finished(slow, ok=True, output_tokens=1, tpot_s=None, target_tpot_s=LOOSE)
    assert all(c.stats.reserved_tpot_s == float("inf") for c in candidates)


def test_requests_that_finish_after_their_replica_left_the_table_end_the_reservation() -> None:
    fast, slow = replica("fast", Generation.MI355X), replica("slow", Generation.MI300X)
    fleet = FleetState()
    fleet.sync(table([fast, slow]))
    fleet.started(fast, TIGHT)
    fleet.started(slow, LOOSE)
    candidates = fleet.candidates(table([fast, slow], version=2))
    assert any(c.stats.reserved_tpot_s == TIGHT for c in candidates)
    fleet.sync(table([fast], version=3))  # the slow replica leaves with its request in flight
    fleet.finished(slow, ok=False, output_tokens=0, tpot_s=None, target_tpot_s=LOOSE)
    remaining = fleet.candidates(table([fast], version=3))
    assert all(c.stats.reserved_tpot_s == float("inf") for c in remaining)  # one target again


def test_tight_requests_keep_to_the_reserved_replicas_and_loose_ones_may_go_anywhere() -> None:
    """While a reservation holds for the tight target, a tight request sees only the reserved
    replica (elsewhere it would bind a large loose batch to its target); a loose one, or any
    request with nothing reserved, sees every candidate."""
    replicas = [replica("fast-0", Generation.MI355X), replica("fast-1", Generation.MI355X)]
    routing_table = table(replicas)
    fleet = FleetState()
    fleet.sync(routing_table)
    candidates = fleet.candidates(routing_table)
    only = SloReservedFilter()

    def seen(target_tpot_s: float) -> list[str]:
        base = view(routing_table)
        at = RoutingView(base.table, base.target_ttft_s, target_tpot_s, base.now_s)
        return [c.replica.replica_id for c in only.filter(request(), at, candidates)]

    fleet.started(replicas[0], TIGHT)
    assert seen(TIGHT) == ["fast-0", "fast-1"]  # one target in flight: nothing reserved
    fleet.started(replicas[1], LOOSE)
    held = [c.replica.replica_id for c in candidates if c.stats.reserved_tpot_s == TIGHT]
    assert len(held) == 1 and seen(TIGHT) == held
    assert seen(LOOSE) == ["fast-0", "fast-1"]


def test_a_finished_request_records_its_tpot_at_the_batch_it_ran_in() -> None:
    """The batch of a TPOT is the mean of what its replica ran at its first and last token."""
    fast = replica("fast", Generation.MI355X)
    fleet = FleetState()
    fleet.sync(table([fast]))
    for _ in range(9):
        fleet.started(fast, TIGHT)
    assert fleet.first_token(fast, 0.1) == 9
    for _ in range(4):
        fleet.finished(fast, ok=True, output_tokens=2, tpot_s=None, target_tpot_s=TIGHT)
    fleet.finished(
        fast, ok=True, output_tokens=16, tpot_s=0.012, target_tpot_s=TIGHT,
        running_at_first_token=9,
    )  # fmt: skip
    stats = fleet.stats("fast")
    assert stats is not None
    # (9 + 5) / 2 = 7 requests at 12 ms: within 13 ms, 1 ms more at 1 ms a sequence: 8
    assert stats.step_curve.batch_within(0.013, 0.001) == pytest.approx(8.0)


def test_a_decision_while_reserved_goes_to_a_reserved_replica_with_the_others_as_fallbacks() -> (
    None
):
    """The reservation narrows the primary only: a reserved replica that fails before a token,
    or dies mid-stream, still leaves the request somewhere to go."""
    replicas = [
        replica("fast-0", Generation.MI355X),
        replica("fast-1", Generation.MI355X),
        replica("slow", Generation.MI300X),
    ]
    routing_table = table(replicas)
    fleet = FleetState()
    fleet.sync(routing_table)
    candidates = fleet.candidates(routing_table)
    fleet.started(replicas[0], TIGHT)
    fleet.started(replicas[2], LOOSE)
    held = {c.replica.replica_id for c in candidates if c.stats.reserved_tpot_s == TIGHT}
    assert len(held) == 1
    capacity = builtin_profiles()["capacity"]
    base = view(routing_table)
    tight = RoutingView(base.table, base.target_ttft_s, TIGHT, base.now_s)
    decision = capacity.decide(request(), tight, candidates)
    assert decision.primary.replica_id in held
    fallbacks = [r.replica_id for r in decision.fallbacks]
    assert sorted(fallbacks) == sorted({"fast-0", "fast-1", "slow"} - held)


def test_only_a_stream_that_ended_well_adds_its_tpot_to_the_step_curve() -> None:
    """A stream cut by the stall timeout after a few tokens, a replica that failed or a client
    that left: their time per token is not the batch's step."""
    fast = replica("fast", Generation.MI355X)
    fleet = FleetState()
    fleet.sync(table([fast]))
    stats = fleet.stats("fast")
    assert stats is not None
    for _ in range(3):
        fleet.started(fast, TIGHT)
        fleet.finished(fast, ok=False, output_tokens=5, tpot_s=7.5, target_tpot_s=TIGHT)
    assert stats.step_curve.batch_within(0.013, 0.001) is None
    fleet.started(fast, TIGHT)
    fleet.finished(fast, ok=True, output_tokens=16, tpot_s=0.012, target_tpot_s=TIGHT)
    assert stats.step_curve.batch_within(0.013, 0.001) == pytest.approx(2.0)


class _CountedWalks(tuple[Candidate, ...]):
    """Candidates that count how often a filter walks them."""

    walks = 0

    def __iter__(self) -> Iterator[Candidate]:
        type(self).walks += 1
        return super().__iter__()


def test_with_the_fleets_reservation_in_the_view_the_filter_walks_the_candidates_once() -> None:
    """A decision while a reservation holds costs O(1), not a walk over the fleet: the result
    is kept per candidate list and reservation, and redone when the reservation is."""
    replicas = [replica(f"fast-{i}", Generation.MI355X) for i in range(4)]
    routing_table = table(replicas)
    fleet = FleetState()
    fleet.sync(routing_table)
    candidates = _CountedWalks(fleet.candidates(routing_table))
    only = SloReservedFilter()
    base = view(routing_table)

    def narrowed(target_tpot_s: float) -> Sequence[Candidate]:
        at = RoutingView(
            base.table, base.target_ttft_s, target_tpot_s, base.now_s, fleet.reservation
        )
        return only.filter(request(), at, candidates)

    def seen(target_tpot_s: float) -> list[str]:
        return [c.replica.replica_id for c in narrowed(target_tpot_s)]

    fleet.started(replicas[0], TIGHT)
    fleet.started(replicas[1], LOOSE)
    held = [c.replica.replica_id for c in candidates if c.stats.reserved_tpot_s == TIGHT]
    _CountedWalks.walks = 0
    for _ in range(100):
        assert seen(TIGHT) == held
        assert narrowed(LOOSE) is candidates  # the reserved replica has room for loose work
    assert _CountedWalks.walks <= 3  # the tight narrowing (two walks), the loose split (one)
    for _ in range(3):  # the tight class's demand grows: the choice is redone, and seen
        fleet.started(replicas[0], TIGHT)
    assert seen(TIGHT) == [
        c.replica.replica_id for c in candidates if c.stats.reserved_tpot_s == TIGHT
    ]


def test_a_reserved_replica_whose_circuit_opens_is_replaced_and_a_draining_one_never_chosen() -> (
    None
):
    fast_0, fast_1, slow = (
        replica("fast-0", Generation.MI355X),
        replica("fast-1", Generation.MI355X),
        replica("slow", Generation.MI300X),
    )
    fleet = FleetState()
    fleet.sync(table([fast_0, fast_1, slow]))

    def held() -> list[str]:
        every = (fleet.stats(r.replica_id) for r in (fast_0, fast_1, slow))
        ids = ("fast-0", "fast-1", "slow")
        return [i for i, s in zip(ids, every, strict=True) if s and s.reserved_tpot_s == TIGHT]

    fleet.started(fast_0, TIGHT)
    fleet.started(slow, LOOSE)
    assert held() == ["fast-0"]
    fleet.circuit_changed("fast-0", True)  # it fails: the tight class needs another now
    assert held() == ["fast-1"]
    fleet.circuit_changed("fast-0", False)
    assert held() == ["fast-1"]  # held ones stay held
    draining = replica("fast-1", Generation.MI355X, state=ReplicaState.DRAINING)
    fleet.sync(table([fast_0, draining, slow], version=2))
    assert held() == ["fast-0"]


def test_a_held_replica_is_let_go_only_once_the_rest_hold_the_claim() -> None:
    """Handing a reserved replica back lets loose work fill it, and taking it again waits for
    that work to end, so a dip in demand just under what the rest hold keeps it; but once the
    rest hold the whole claim it goes, so a demand that sits near one replica's tight batch
    does not hold two for good."""
    capacities = [100.0, 100.0]
    assert reserved_replicas(capacities, 99, held=[0]) == [0]  # need 100: one holds it
    assert reserved_replicas(capacities, 100, held=[0]) == [0, 1]  # need 101: taken
    assert reserved_replicas(capacities, 150, held=[0]) == [0, 1]
    assert reserved_replicas(capacities, 90, held=[0, 1]) == [0, 1]  # 91 + 2√90 > 100
    assert reserved_replicas(capacities, 82, held=[0, 1]) == [0, 1]  # 83 + 2√82 > 100
    assert reserved_replicas(capacities, 80, held=[0, 1]) == [0]  # 81 + 2√80 ≤ 100
    assert reserved_replicas(capacities, 90) == [0]  # a new choice takes no more than the need
    assert tight_need(0) == 0 and tight_need(60) == 61
    # 64 tight requests: 65 sequences, and 2 × √64 for the count's swings, shared by tight batch
    assert claims([100.0, 50.0], 64) == [pytest.approx(54.0), pytest.approx(27.0)]
    assert claims([100.0, 50.0], 300) == [100.0, 50.0]  # at most the whole batch
    assert claims([100.0, 50.0], 0) == [0.0, 0.0]


def test_the_router_lets_a_held_replica_go_only_after_a_loose_requests_life() -> None:
    """A dip in the tight demand shorter than a loose request's life keeps the reservation:
    loose work let onto the replica in the dip would hold it that long. The wait is the
    smoothed life of the loose requests that finished (30 s before any did), and it ends on
    the router's clock, whether or not the demand moves again."""
    now = [0.0]
    fleet, candidates, per_replica = _one_tight_and_one_loose(clock=lambda: now[0])
    fast_0, _, slow = (c.replica for c in candidates)
    fleet.waiting(TIGHT, per_replica)
    assert len(_reserved(candidates)) == 2
    fleet.waiting(TIGHT, -per_replica)  # the dip: one replica would do
    now[0] = 29.0
    fleet.started(slow, LOOSE)  # any change of the counts: the demand itself stays
    assert len(_reserved(candidates)) == 2
    now[0] = 31.0
    fleet.started(slow, LOOSE)
    assert len(_reserved(candidates)) == 1
    # loose requests that live 2 s: the next dip lets go after 2 s, not 30
    for _ in range(200):
        fleet.started(slow, LOOSE)
        fleet.finished(
            slow, ok=True, output_tokens=1, tpot_s=None, target_tpot_s=LOOSE, started_s=now[0] - 2
        )
    fleet.waiting(TIGHT, per_replica)
    assert len(_reserved(candidates)) == 2
    fleet.waiting(TIGHT, -per_replica)
    now[0] = 32.5
    fleet.started(slow, LOOSE)
    assert len(_reserved(candidates)) == 2
    now[0] = 33.5
    fleet.started(slow, LOOSE)
    assert len(_reserved(candidates)) == 1
    # once the tight class is gone, nothing stays held
    fleet.finished(fast_0, ok=True, output_tokens=1, tpot_s=None, target_tpot_s=TIGHT)
    assert _reserved(candidates) == []


def test_a_held_replica_the_choice_keeps_again_starts_its_wait_afresh() -> None:
    """The wait counts one unbroken stretch of wanting to let the replica go: a demand that
    comes back in between resets it."""
    now = [0.0]
    fleet, candidates, per_replica = _one_tight_and_one_loose(clock=lambda: now[0])
    slow = candidates[2].replica
    fleet.waiting(TIGHT, per_replica)
    fleet.waiting(TIGHT, -per_replica)  # wanted from 0 s
    now[0] = 20.0
    fleet.waiting(TIGHT, per_replica)  # the demand is back: both are needed again
    now[0] = 25.0
    fleet.waiting(TIGHT, -per_replica)  # wanted again, from 25 s
    now[0] = 50.0
    fleet.started(slow, LOOSE)
    assert len(_reserved(candidates)) == 2  # 25 s of this stretch, not 50 since the first
    now[0] = 56.0
    fleet.started(slow, LOOSE)
    assert len(_reserved(candidates)) == 1


def _one_tight_and_one_loose(
    clock: Callable[[], float],
) -> tuple[FleetState, list[Candidate], int]:
    """Two fast replicas and a slow one, a loose request on the slow one and a tight one on the
    first fast one (which is reserved), and the sequences one fast replica holds within the
    tight target."""
    fleet, candidates = _two_fast_and_a_slow(clock=clock)
    fast_0, _, slow = (c.replica for c in candidates)
    fleet.started(slow, LOOSE)
    fleet.started(fast_0, TIGHT)
    (held,) = _reserved(candidates)
    return fleet, candidates, int(held.stats.concurrency_capacity(TIGHT))


def _two_fast_and_a_slow(
    clock: Callable[[], float] | None = None,
) -> tuple[FleetState, list[Candidate]]:
    routing_table = table(
        [
            replica("fast-0", Generation.MI355X),
            replica("fast-1", Generation.MI355X),
            replica("slow", Generation.MI300X),
        ]
    )
    fleet = FleetState(clock=clock)
    fleet.sync(routing_table)
    return fleet, fleet.candidates(routing_table)


def _reserved(candidates: Sequence[Candidate]) -> list[Candidate]:
    return [c for c in candidates if c.stats.reserved_tpot_s == TIGHT]


def test_tight_requests_waiting_in_admission_grow_the_reservation() -> None:
    """The demand is the tight requests in flight and those waiting: the ones that wait are
    the ones the reservation does not hold yet."""
    fleet, candidates = _two_fast_and_a_slow()
    fast_0, _, slow = (c.replica for c in candidates)
    fleet.started(slow, LOOSE)
    fleet.started(fast_0, TIGHT)
    (held,) = _reserved(candidates)
    per_replica = held.stats.concurrency_capacity(TIGHT)
    assert held.stats.tight_claim == pytest.approx(4.0)  # one in flight, one may come, 2 × √1
    fleet.waiting(TIGHT, int(per_replica))  # more wait than one replica holds
    assert len(_reserved(candidates)) == 2
    fleet.waiting(TIGHT, -int(per_replica))
    assert len(_reserved(candidates)) == 1
    fleet.finished(fast_0, ok=True, output_tokens=1, tpot_s=None, target_tpot_s=TIGHT)
    fleet.waiting(TIGHT, 1)  # only waiting: still tight demand among the loose work
    assert len(_reserved(candidates)) == 1


def test_loose_work_takes_only_what_the_tight_class_leaves_on_a_reserved_replica() -> None:
    """The reserved replica's batch within the tight target, less what runs there, less the
    tight class's claim not yet in flight there: loose work past that is kept off it (the
    filter, for its primary) and out of its admission room."""
    fleet, candidates = _two_fast_and_a_slow()
    fast_0, fast_1, slow = (c.replica for c in candidates)
    fleet.started(slow, LOOSE)
    for _ in range(20):
        fleet.started(fast_0, TIGHT)
    (held,) = _reserved(candidates)
    assert held.replica is fast_0
    tight_batch = held.stats.concurrency_capacity(TIGHT)
    fleet.waiting(TIGHT, 10)  # 20 in flight, 10 waiting: 31 + 2√30 claimed, 20 of them here
    claim = 31 + 2 * 30**0.5
    assert held.stats.tight_claim == pytest.approx(claim)
    assert held.stats.room_for_looser() == pytest.approx(tight_batch - 20 - (claim - 20))
    only = SloReservedFilter()
    base = view(fleet_table := table([c.replica for c in candidates]))
    loose = RoutingView(fleet_table, base.target_ttft_s, LOOSE, base.now_s, fleet.reservation)
    assert only.filter(request(), loose, candidates) is candidates  # room left: any replica
    while held.stats.room_for_looser() >= 1.0:
        fleet.started(fast_0, LOOSE)
    assert [c.replica for c in only.filter(request(), loose, candidates)] == [fast_1, slow]
    no_view = RoutingView(fleet_table, base.target_ttft_s, LOOSE, base.now_s)
    assert [c.replica for c in only.filter(request(), no_view, candidates)] == [fast_1, slow]
    fleet.waiting(TIGHT, -10)  # the waiting ones gave up: their share is free again
    assert held.stats.room_for_looser() >= 8.0
    assert only.filter(request(), loose, candidates) is candidates
    assert candidates[1].stats.room_for_looser() == float("inf")  # not reserved: unbounded


def test_a_tight_request_skips_a_reserved_replica_whose_engine_queues_behind_loose_work() -> None:
    """A replica just reserved may still run a large loose batch with a queue in its engine: a
    tight request sent there would wait behind it and then run in it, so it goes to the other
    reserved replicas, or anywhere reserved if every one queues."""
    fleet, candidates = _two_fast_and_a_slow()
    fast_0, fast_1, slow = (c.replica for c in candidates)
    fleet.started(slow, LOOSE)
    fleet.started(fast_1, LOOSE)
    fleet.started(fast_0, TIGHT)
    fleet.waiting(TIGHT, int(candidates[0].stats.concurrency_capacity(TIGHT)))
    assert [c.replica for c in _reserved(candidates)] == [fast_0, fast_1]
    only = SloReservedFilter()
    fleet_table = table([c.replica for c in candidates])
    base = view(fleet_table)
    tight = RoutingView(fleet_table, base.target_ttft_s, TIGHT, base.now_s, fleet.reservation)
    no_view = RoutingView(fleet_table, base.target_ttft_s, TIGHT, base.now_s)
    assert [c.replica for c in only.filter(request(), tight, candidates)] == [fast_0, fast_1]
    fleet.reported("fast-1", ReplicaLoad(running=300, waiting=40, kv_cache_usage=0.9), now_s=0.0)
    assert candidates[1].stats.queued_behind_looser()
    assert [c.replica for c in only.filter(request(), tight, candidates)] == [fast_0]
    assert [c.replica for c in only.filter(request(), no_view, candidates)] == [fast_0]
    fleet.reported("fast-0", ReplicaLoad(running=1, waiting=0, kv_cache_usage=0.1), now_s=0.0)
    assert not candidates[0].stats.queued_behind_looser()  # no loose work there: no queue behind it
    fleet.reported("fast-1", ReplicaLoad(running=300, waiting=2, kv_cache_usage=0.9), now_s=0.0)
    assert [c.replica for c in only.filter(request(), tight, candidates)] == [fast_0, fast_1]
