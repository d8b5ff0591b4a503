"""Admission against capacity, in one event loop with a room the test sets: admit while there is
room, queue briefly in priority order, refuse at once (with a retry hint) what cannot be served
within the queue timeout, and never hold a request past that timeout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

import pytest

from orchestrator.admission.controller import (
    CAPACITY_TTL_S,
    MIN_DEQUEUES,
    UNLIMITED,
    AdmissionController,
    FleetRoom,
    Ticket,
)
from orchestrator.admission.errors import Refused
from orchestrator.admission.settings import AdmissionSettings
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.routing.context import Priority

MODEL = "m"
INTERACTIVE, BATCH = Priority.INTERACTIVE, Priority.BATCH


class Room:
    """The fleet's room as a test sets it; `batch_capacity` is the batch class's (default: the
    same target, so the same room)."""

    def __init__(
        self,
        capacity: float,
        others: int = 0,
        batch_capacity: float | None = None,
        reserved: float = 0.0,
        free: float = float("inf"),
    ) -> None:
        self.free = free  # requests that fit one by one on some replica within their target
        self.capacity = capacity
        self.others = others
        self.batch_capacity = batch_capacity
        self.reserved = reserved  # the interactive class's room held on reserved replicas

    def __call__(self, model: str, slo_class: str) -> FleetRoom | None:
        if model != MODEL or self.capacity <= 0:
            return None
        if slo_class == BATCH.value and self.batch_capacity is not None:
            return FleetRoom(self.batch_capacity, self.others, free=self.free)
        return FleetRoom(self.capacity, self.others, self.reserved, self.free)


def controller(room: Room, **settings: Any) -> AdmissionController:
    return AdmissionController(AdmissionSettings(**settings), room)


def run(coroutine: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coroutine)


def test_admits_up_to_the_capacity_then_queues_and_a_release_admits_the_next() -> None:
    async def scenario() -> None:
        gate = controller(Room(2), queue_timeout_s=5.0)
        first = await gate.admit(MODEL, INTERACTIVE)
        await gate.admit(MODEL, INTERACTIVE)
        # No request has finished yet: nothing says how long a wait would be, so refuse now.
        with pytest.raises(Refused):
            await gate.admit(MODEL, INTERACTIVE)
        first.release()  # a finished request: from now on waits are predicted from hold times
        await gate.admit(MODEL, INTERACTIVE)
        waiting = asyncio.create_task(gate.admit(MODEL, INTERACTIVE))
        await asyncio.sleep(0.01)
        assert not waiting.done() and gate.queued() == 1
        first_again = gate.active()
        (await _any_ticket(gate)).release()
        ticket = await asyncio.wait_for(waiting, 1.0)
        assert isinstance(ticket, Ticket) and gate.active() == first_again
        assert gate.queued() == 0

    run(scenario())


async def _any_ticket(gate: AdmissionController) -> Ticket:
    """A ticket for a slot already counted: releasing it frees one slot."""
    lane = gate._lanes[MODEL]
    return Ticket(gate, lane, asyncio.get_running_loop().time())


def test_a_request_that_waits_past_the_queue_timeout_gets_429_then_not_later() -> None:
    async def scenario() -> None:
        gate = controller(Room(1), queue_timeout_s=0.3)
        held = await gate.admit(MODEL, INTERACTIVE)
        held.release()
        await gate.admit(MODEL, INTERACTIVE)  # the one slot, held for good
        gate._lanes[MODEL].hold_s = 0.01  # finished requests said waits are short
        started = time.monotonic()
        with pytest.raises(Refused) as refused:
            await gate.admit(MODEL, INTERACTIVE)
        waited = time.monotonic() - started
        assert 0.25 <= waited < 5.0  # the timeout, not forever
        assert refused.value.reason == "refused_timeout"
        assert refused.value.code is ErrorCode.RESOURCE_EXHAUSTED
        assert int(refused.value.retry_after_header) >= 1
        assert gate.queued() == 0

    run(scenario())


def test_a_full_queue_refuses_at_once() -> None:
    async def scenario() -> None:
        gate = controller(Room(1), queue_timeout_s=30.0, max_queue=2)
        (await gate.admit(MODEL, INTERACTIVE)).release()
        await gate.admit(MODEL, INTERACTIVE)
        gate._lanes[MODEL].hold_s = 0.001
        waiters = [asyncio.create_task(gate.admit(MODEL, INTERACTIVE)) for _ in range(2)]
        await asyncio.sleep(0.01)
        started = time.monotonic()
        with pytest.raises(Refused) as refused:
            await gate.admit(MODEL, INTERACTIVE)
        assert time.monotonic() - started < 1.0
        assert refused.value.reason == "refused_queue_full"
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        assert gate.queued() == 0

    run(scenario())


def test_a_wait_predicted_past_the_timeout_is_refused_at_once() -> None:
    async def scenario() -> None:
        gate = controller(Room(1), queue_timeout_s=1.0)
        (await gate.admit(MODEL, INTERACTIVE)).release()
        await gate.admit(MODEL, INTERACTIVE)
        lane = gate._lanes[MODEL]
        now = asyncio.get_running_loop().time()
        lane.served.extend(now - 1.9 + 0.1 * i for i in range(MIN_DEQUEUES))  # 10 served/s
        first = asyncio.create_task(gate.admit(MODEL, INTERACTIVE))  # predicted 0.1 s: it may wait
        await asyncio.sleep(0.01)
        assert not first.done()
        queued = [asyncio.create_task(gate.admit(MODEL, INTERACTIVE)) for _ in range(4)]
        await asyncio.sleep(0.01)
        started = time.monotonic()
        with pytest.raises(Refused) as refused:  # predicted 0.6 s: refused now
            await gate.admit(MODEL, INTERACTIVE)
        assert time.monotonic() - started < 0.5
        assert refused.value.reason == "refused_wait"
        assert refused.value.retry_after_s >= 0.5
        assert not any(task.done() for task in queued)  # predicted 0.2 to 0.5 s: they wait

    run(scenario())


def test_interactive_is_served_before_batch_and_batch_leaves_the_reserve() -> None:
    async def scenario() -> None:
        gate = controller(Room(10), queue_timeout_s=5.0, batch_reserve=0.2)
        tickets = [await gate.admit(MODEL, BATCH) for _ in range(8)]  # batch stops at 80%
        tickets[0].release()
        tickets[0] = await gate.admit(MODEL, BATCH)
        gate._lanes[MODEL].hold_s = 0.01
        batch_waiter = asyncio.create_task(gate.admit(MODEL, BATCH))
        await asyncio.sleep(0.01)
        assert not batch_waiter.done()  # 8 of 10 in use: batch waits ...
        tickets.append(await gate.admit(MODEL, INTERACTIVE))  # ... interactive finds room at once
        tickets.append(await gate.admit(MODEL, INTERACTIVE))
        interactive_waiter = asyncio.create_task(gate.admit(MODEL, INTERACTIVE))
        await asyncio.sleep(0.01)
        assert not interactive_waiter.done()
        tickets.pop().release()  # one slot: the interactive waiter, queued later, gets it
        await asyncio.wait_for(interactive_waiter, 1.0)
        assert not batch_waiter.done()
        for ticket in tickets[:3]:
            ticket.release()
        await asyncio.wait_for(batch_waiter, 1.0)

    run(scenario())


def test_an_interactive_request_displaces_a_queued_batch_one_when_the_queue_is_full() -> None:
    async def scenario() -> None:
        gate = controller(Room(1), queue_timeout_s=30.0, max_queue=1, batch_reserve=0.0)
        (await gate.admit(MODEL, INTERACTIVE)).release()
        held = await gate.admit(MODEL, INTERACTIVE)
        gate._lanes[MODEL].hold_s = 0.001
        batch_waiter = asyncio.create_task(gate.admit(MODEL, BATCH))
        await asyncio.sleep(0.01)
        interactive_waiter = asyncio.create_task(gate.admit(MODEL, INTERACTIVE))
        await asyncio.sleep(0.01)
        with pytest.raises(Refused) as refused:
            await asyncio.wait_for(batch_waiter, 1.0)
        assert refused.value.reason == "refused_displaced"
        held.release()
        await asyncio.wait_for(interactive_waiter, 1.0)

    run(scenario())


def test_other_routers_load_takes_room() -> None:
    async def scenario() -> None:
        room = Room(4, others=3)
        gate = controller(room, queue_timeout_s=5.0)
        await gate.admit(MODEL, INTERACTIVE)  # 4 - 3 = 1 slot
        with pytest.raises(Refused):
            await gate.admit(MODEL, INTERACTIVE)

    run(scenario())


def test_off_switch_no_capacity_and_unknown_models_admit_everything() -> None:
    async def scenario() -> None:
        off = controller(Room(1), enabled=False)
        assert all([await off.admit(MODEL, INTERACTIVE) is UNLIMITED for _ in range(50)])
        dark = controller(Room(0))  # no routable replica: the dispatcher answers 503
        assert await dark.admit(MODEL, INTERACTIVE) is UNLIMITED
        assert await controller(Room(1)).admit("other-model", INTERACTIVE) is UNLIMITED

    run(scenario())


def test_a_cancelled_waiter_leaves_the_queue_and_a_double_release_counts_once() -> None:
    async def scenario() -> None:
        gate = controller(Room(1), queue_timeout_s=30.0)
        (await gate.admit(MODEL, INTERACTIVE)).release()
        held = await gate.admit(MODEL, INTERACTIVE)
        gate._lanes[MODEL].hold_s = 0.001
        waiter = asyncio.create_task(gate.admit(MODEL, INTERACTIVE))
        await asyncio.sleep(0.01)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert gate.queued() == 0
        held.release()
        held.release()
        assert gate.active() == 0

    run(scenario())


def test_lanes_are_bounded_by_the_models_served() -> None:
    async def scenario() -> None:
        gate = controller(Room(4))
        (await gate.admit(MODEL, INTERACTIVE)).release()
        assert gate.lanes() == 1
        gate.forget_models_except(set())
        assert gate.lanes() == 0

    run(scenario())


def test_settings_reject_nonsense_naming_the_field() -> None:
    for field, value in (("max_queue", -1), ("queue_timeout_s", -1.0), ("batch_reserve", 1.0),
                         ("capacity_factor", 0.0)):  # fmt: skip
        with pytest.raises(OrchestratorError) as error:
            AdmissionSettings(**{field: value})
        assert error.value.param == field


def test_batch_with_a_loose_target_fills_the_room_its_target_gives_and_interactive_counts_it() -> (
    None
):
    """Interactive (tight TPOT) fits 4 at once, batch (loose) 16: batch takes what its target
    allows less the reserve, and each batch request takes a quarter of an interactive slot."""

    async def scenario() -> None:
        gate = controller(Room(4, batch_capacity=16), batch_reserve=0.25, max_queue=0)
        batch = [await gate.admit(MODEL, BATCH) for _ in range(12)]  # 16 x (1 - 0.25)
        with pytest.raises(Refused):
            await gate.admit(MODEL, BATCH)
        # 12 batch requests weigh 3 interactive ones: one interactive request still fits
        await gate.admit(MODEL, INTERACTIVE)
        with pytest.raises(Refused):
            await gate.admit(MODEL, INTERACTIVE)
        for ticket in batch[:4]:
            ticket.release()  # a whole interactive slot back
        await gate.admit(MODEL, INTERACTIVE)

    run(scenario())


def test_the_tight_class_gets_its_reserved_room_whatever_batch_runs_and_weighs_one_batch_slot() -> (
    None
):
    """Interactive fits 4 at once fleet-wide, 3 of them on replicas held for it; batch 16.
    Batch fills its room, yet 3 interactive requests are admitted; each then takes one batch
    slot (they sit on reserved replicas, which batch's room counts at the tight target)."""

    async def scenario() -> None:
        gate = controller(Room(4, batch_capacity=16, reserved=3), batch_reserve=0.25, max_queue=0)
        batch = [await gate.admit(MODEL, BATCH) for _ in range(12)]  # 16 x (1 - 0.25)
        interactive = [await gate.admit(MODEL, INTERACTIVE) for _ in range(3)]
        with pytest.raises(Refused):
            await gate.admit(MODEL, INTERACTIVE)  # past the reservation, batch counts again
        for ticket in batch[:4]:
            ticket.release()
        batch.append(await gate.admit(MODEL, BATCH))  # 11 + 3 interactive < 12 slots
        with pytest.raises(Refused):
            await gate.admit(MODEL, BATCH)  # 12 + 3 > 12: refused (batch first)
        assert len(interactive) == 3

    run(scenario())


def test_fleet_room_is_not_enough_a_request_waits_until_a_replica_would_run_it_in_time() -> None:
    """The fleet holds 10, but only one more request fits on any replica within its target (the
    rest of the room is on replicas already past the batch their target allows): one is
    admitted, the next waits (here: refused, nothing says yet how long) until a slot frees,
    even though the reserved room alone would have let it in."""

    async def scenario() -> None:
        room = Room(10, reserved=10, free=1)
        gate = controller(room, queue_timeout_s=5.0)
        first = await gate.admit(MODEL, INTERACTIVE)
        with pytest.raises(Refused):
            await gate.admit(MODEL, INTERACTIVE)  # admitted since the room was read: taken
        first.release()  # its slot is back: free again once the room is read again
        await asyncio.sleep(2 * CAPACITY_TTL_S)
        await gate.admit(MODEL, INTERACTIVE)
        room.free = 0  # ... and it runs there now
        waiting = asyncio.create_task(gate.admit(MODEL, INTERACTIVE))
        await asyncio.sleep(2 * CAPACITY_TTL_S)
        assert not waiting.done() and gate.queued() == 1  # the room read again: still none
        room.free = 1  # a replica's batch came down
        await asyncio.wait_for(waiting, 1.0)
        assert gate.active() == 2

    run(scenario())


def test_batch_admitted_since_the_room_was_read_leaves_the_tight_class_its_reserved_free_room() -> (
    None
):
    """Batch requests go to the replicas not held for the tight class: admitting them in the
    same 50 ms does not use up the free room counted on the reserved ones."""

    async def scenario() -> None:
        room = Room(10, reserved=10, free=2, batch_capacity=100)
        gate = controller(room, queue_timeout_s=5.0)
        await gate.admit(MODEL, BATCH)
        await gate.admit(MODEL, BATCH)
        await gate.admit(MODEL, INTERACTIVE)
        await gate.admit(MODEL, INTERACTIVE)
        with pytest.raises(Refused):  # the tight class's own admissions do use it up
            await gate.admit(MODEL, INTERACTIVE)
        assert gate.active() == 4

    run(scenario())


def test_a_release_gives_its_free_slot_back_before_the_room_is_read_again() -> None:
    async def scenario() -> None:
        room = Room(10, free=1)
        gate = controller(room, queue_timeout_s=5.0)
        first = await gate.admit(MODEL, INTERACTIVE)
        first.release()  # within the room's 50 ms: its slot counts as free again at once
        await asyncio.wait_for(gate.admit(MODEL, INTERACTIVE), CAPACITY_TTL_S / 2)
        assert gate.active() == 1

    run(scenario())


def test_a_request_no_replica_has_room_for_is_refused_at_once_when_the_running_few_end_late() -> (
    None
):
    """The fleet holds 100 but no replica has free room: the queue drains only as the one
    request running ends, so a wait of its whole hold time is predicted, not a hundredth."""

    async def scenario() -> None:
        room = Room(100, free=1)
        gate = controller(room, queue_timeout_s=0.2)
        held = await gate.admit(MODEL, INTERACTIVE)
        await asyncio.sleep(0.15)
        held.release()  # slots are held 0.15 s
        await gate.admit(MODEL, INTERACTIVE)  # it takes the free room
        started = time.monotonic()
        with pytest.raises(Refused) as refused:
            await gate.admit(MODEL, INTERACTIVE)
        assert refused.value.reason == "refused_wait"  # at once, not after the whole timeout
        assert time.monotonic() - started < 0.1

    run(scenario())


def _two_rooms(
    reserved: float, heard: list[tuple[str, int]]
) -> tuple[AdmissionController, dict[str, FleetRoom]]:
    rooms = {
        INTERACTIVE.value: FleetRoom(10, reserved=reserved, free=1),
        BATCH.value: FleetRoom(100, free=50),
    }
    gate = AdmissionController(
        AdmissionSettings(queue_timeout_s=5.0),
        lambda model, slo_class: rooms[slo_class],
        on_waiting=lambda model, slo_class, delta: heard.append((slo_class, delta)),
    )
    return gate, rooms


@pytest.mark.parametrize("reserved", [10.0, 0.0])
def test_batch_waits_behind_interactive_only_where_they_share_replicas(reserved: float) -> None:
    """Interactive requests waiting for the replicas held for them (their room is reserved)
    do not hold back a batch request that fits elsewhere: batch only takes what they leave
    there. Without a reservation they share the replicas, and batch waits behind them. The
    waiting requests are reported (routing counts them in their class's demand)."""

    async def scenario() -> None:
        heard: list[tuple[str, int]] = []
        gate, rooms = _two_rooms(reserved, heard)
        (await gate.admit(MODEL, INTERACTIVE)).release()  # one served: waits can be predicted
        rooms[INTERACTIVE.value] = FleetRoom(10, reserved=reserved, free=0)
        await asyncio.sleep(2 * CAPACITY_TTL_S)
        waiting = asyncio.create_task(gate.admit(MODEL, INTERACTIVE))
        await asyncio.sleep(0)
        assert heard == [(INTERACTIVE.value, 1)] and not waiting.done()
        batch = asyncio.create_task(gate.admit(MODEL, BATCH))
        await asyncio.sleep(2 * CAPACITY_TTL_S)
        assert batch.done() is (reserved > 0)
        rooms[INTERACTIVE.value] = FleetRoom(10, reserved=reserved, free=1)
        await asyncio.wait_for(waiting, 1.0)
        await asyncio.wait_for(batch, 1.0)
        interactive = [delta for slo_class, delta in heard if slo_class == INTERACTIVE.value]
        assert interactive == [1, -1]
        assert heard.count((BATCH.value, 1)) == (0 if reserved > 0 else 1)
        assert sum(delta for _, delta in heard) == 0

    run(scenario())


def test_a_waiting_hook_that_fails_leaves_no_waiter_behind() -> None:
    """A request whose wait could not be reported fails with the hook's error, and its place
    in the queue goes with it: the next request is admitted as soon as there is room."""

    class HookBroke(Exception):
        pass

    def hook(model: str, slo_class: str, delta: int) -> None:
        heard.append(delta)
        if delta > 0 and len(heard) == 1:
            raise HookBroke

    heard: list[int] = []
    rooms = {INTERACTIVE.value: FleetRoom(10, free=1), BATCH.value: FleetRoom(10, free=0)}
    gate = AdmissionController(
        AdmissionSettings(queue_timeout_s=5.0), lambda model, slo_class: rooms[slo_class],
        on_waiting=hook,
    )  # fmt: skip

    async def scenario() -> None:
        (await gate.admit(MODEL, INTERACTIVE)).release()  # one served: waits can be predicted
        rooms[INTERACTIVE.value] = FleetRoom(10, free=0)
        await asyncio.sleep(2 * CAPACITY_TTL_S)
        with pytest.raises(HookBroke):
            await gate.admit(MODEL, INTERACTIVE)
        assert gate.queued() == 0 and heard == [1]  # no -1 for a +1 that never counted
        second = asyncio.create_task(gate.admit(MODEL, INTERACTIVE))
        await asyncio.sleep(2 * CAPACITY_TTL_S)
        rooms[INTERACTIVE.value] = FleetRoom(10, free=1)
        (await asyncio.wait_for(second, 1.0)).release()
        assert heard == [1, 1, -1]

    run(scenario())
