"""Admission against the fleet's capacity: admit while there is room, queue briefly, else 429.

Room is the fleet's concurrent capacity for the request's class: for every routable replica of
the model, the sequences it decodes at once within that class's TPOT target
(`ReplicaStats.concurrency_capacity`), minus what other routers run there. Classes with different
targets share the fleet in proportion: a request of class k takes 1 / room(k) of it, so a batch
request with a loose target (a large room) takes a smaller share than an interactive one with a
tight target, and the load a class sees is Σ_j active_j · room(k) / room(j). Admitted
requests hold a slot until their last byte. A request that finds no room waits in a short queue;
one that cannot be served within the queue timeout is refused at once rather than after waiting,
with a `Retry-After`: the queue is full, or its predicted wait passes half the timeout. The
prediction is the position in the queue over the rate at which the queue was served in the last
two timeouts, or, before twenty requests were served from it, times the mean time a request
holds its slot over the number of slots (over the requests running, while no replica has free
room: one of them must end first); before any request has finished nothing says how long a
wait would be, so a request that finds no room then is refused at once.

Interactive requests are served before batch ones: batch is admitted only below `1 - batch_reserve`
of the capacity, waits behind every interactive request (but not behind those waiting for replicas
reserved for them, where batch only takes what they leave), and a queued batch request is refused
to make room when an interactive one finds the queue full. While routing holds replicas for a
class's tight target (its room's `reserved`), that class is admitted up to the reserved room
whatever the looser classes run (they are kept off those replicas' batch), and each of its requests
weighs one slot in a looser class's room (those replicas count there at the tight target): the
tight class meets its target, the loose ones take the rest and are refused first.

Whatever the fleet-wide room says, a request is admitted only while some replica would run it
within its class's target, i.e. holds fewer than its batch within the target that binds it
there (`FleetRoom.free`): a request no replica can serve in time waits here (or is refused),
rather than being queued where it would miss.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from orchestrator.admission.errors import Refused
from orchestrator.admission.metrics import AdmissionMetrics
from orchestrator.admission.settings import AdmissionSettings
from orchestrator.forwarding.loop_metrics import CounterCell
from orchestrator.routing.context import Priority

CAPACITY_TTL_S: Final = 0.05  # capacity is recomputed at most this often per model
PUMP_EVERY_S: Final = 0.05  # while requests wait, room is re-checked this often (scrapes move it)
HOLD_SMOOTHING: Final = 0.05  # weight of one request in the mean time a slot is held
MIN_DEQUEUES: Final = 20  # requests served from the queue in the window before its rate is trusted
MAX_SERVED: Final = 1024  # dequeue times kept per model (the rate is then taken over fewer)
WAIT_MARGIN: Final = 0.5  # refuse at once when the predicted wait passes this share of the timeout


@dataclass(frozen=True, slots=True)
class FleetRoom:
    """A model's concurrent capacity (requests) and the requests other routers run on it;
    `reserved` is the part of it on replicas held to this class's target for it (the
    tightest class in flight, `routing/reservation.py`): looser classes do not count there."""

    capacity: float
    others: float = 0.0
    reserved: float = 0.0
    # requests that fit now one by one on the replica they would go to: Σ over replicas of
    # ⌊room there × capacity factor − what runs there⌋ (at least 0), each at the target that
    # binds its batch
    free: float = math.inf


RoomOf = Callable[[str, str], FleetRoom | None]
WaitingMoved = Callable[[str, str, int], None]
"""(model, class, ±n): requests of that class began or ended waiting (routing counts them)."""
"""The room for a model and request class now, or None when no routable replica serves it
(admission then steps aside and the dispatcher answers 404 or 503)."""


class _Waiter:
    __slots__ = ("future", "priority", "since_s")

    def __init__(self, future: asyncio.Future[None], priority: Priority, since_s: float) -> None:
        self.future = future
        self.priority = priority
        self.since_s = since_s


class _Lane:
    """One model's admitted count, queues and release statistics."""

    __slots__ = (
        "active", "active_by", "checked_s", "hold_s", "model", "queues", "room", "rooms", "served",
        "taken_by",
    )  # fmt: skip

    def __init__(self, model: str) -> None:
        self.model = model
        self.active = 0
        self.active_by: dict[Priority, int] = dict.fromkeys(Priority, 0)
        self.queues: dict[Priority, deque[_Waiter]] = {p: deque() for p in Priority}
        self.room: FleetRoom | None = None  # the interactive class's: None, no replica
        self.rooms: dict[Priority, FleetRoom] = {}
        self.checked_s = -math.inf
        self.served: deque[float] = deque(maxlen=MAX_SERVED)  # when waiters were admitted
        self.hold_s: float | None = None  # mean seconds an admitted request holds its slot
        # requests admitted since the rooms were read, by class (each took a free slot)
        self.taken_by: dict[Priority, int] = dict.fromkeys(Priority, 0)

    def queued(self) -> int:
        return sum(len(queue) for queue in self.queues.values())

    def waiting(self) -> bool:
        """Whether any request waits (what a release asks, so without summing)."""
        return any(self.queues.values())


class Ticket:
    """An admitted request's slot; `release()` once its answer ended (more calls do nothing)."""

    __slots__ = ("_controller", "_lane", "_priority", "_since_s")

    def __init__(
        self,
        controller: AdmissionController | None,
        lane: _Lane | None,
        since_s: float = 0.0,
        priority: Priority = Priority.INTERACTIVE,
    ) -> None:
        self._controller = controller
        self._lane = lane
        self._since_s = since_s
        self._priority = priority

    def release(self) -> None:
        controller, self._controller = self._controller, None
        if controller is not None and self._lane is not None:
            controller.released(self._lane, self._since_s, self._priority)


UNLIMITED: Final = Ticket(None, None)


class AdmissionController:
    """Per-model admission lanes; run inside the router's event loop."""

    def __init__(
        self,
        settings: AdmissionSettings,
        room_of: RoomOf,
        *,
        metrics: AdmissionMetrics | None = None,
        latency_scale: float = 1.0,
        on_waiting: WaitingMoved | None = None,
    ) -> None:
        """`on_waiting` hears each request that begins or ends waiting, by model and class:
        the tight class's waiting requests are demand the routing's reservation holds room for."""
        self.settings = settings
        self._room_of = room_of
        self._on_waiting = on_waiting
        self._metrics = metrics
        self.queue_timeout_s = settings.queue_timeout_s * latency_scale
        self._lanes: dict[str, _Lane] = {}
        self._pump_timer: asyncio.TimerHandle | None = None
        # The hot path's metrics: the admitted counters looked up once, the active gauge read
        # from the lanes when scraped rather than moved on every request.
        self._admitted_counts: dict[Priority, CounterCell] | None = None
        if metrics is not None:
            self._admitted_counts = {
                p: metrics.decisions.labels(p.value, "admitted") for p in Priority
            }
            metrics.active.set_function(self.active)

    # -- the request's side ----------------------------------------------------------------------

    async def admit(self, model: str, priority: Priority) -> Ticket:
        """A slot for a request of `model`, at once or after a short wait; raises `Refused`."""
        if not self.settings.enabled:
            return UNLIMITED
        loop = asyncio.get_running_loop()
        now_s = loop.time()
        lane = self._lanes.get(model)
        room = self._room(model, lane, now_s)
        if room is None:
            return UNLIMITED
        if lane is None:
            lane = self._lanes[model] = _Lane(model)
            self._room(model, lane, now_s)
        if not self._ahead_of(lane, priority) and self._fits(lane, priority):
            return self._admitted(lane, priority, now_s)
        self._make_room_in_queue(lane, priority)
        position = self._position(lane, priority)
        wait_s = self._predicted_wait_s(lane, position, self._draining(lane, priority))
        if wait_s is None or wait_s > WAIT_MARGIN * self.queue_timeout_s:
            raise self._refuse(priority, "refused_wait", wait_s or self._retry_s(lane))
        waiter = _Waiter(loop.create_future(), priority, now_s)
        queue = lane.queues[priority]
        try:  # from here on, whatever ends the wait takes the waiter out of its queue
            self._waiting(lane, priority, 1)  # first: a hook that fails queues nothing
            queue.append(waiter)
            self._depth(priority, len(queue))
            self._schedule_pump()
            async with asyncio.timeout(self.queue_timeout_s):
                await waiter.future
        except TimeoutError:
            self._drop(lane, waiter)
            raise self._refuse(priority, "refused_timeout", self._retry_s(lane)) from None
        except BaseException:
            self._drop(lane, waiter)
            raise
        # the slot was counted when the waiter was woken
        admitted_s = loop.time()
        if self._metrics is not None:
            self._metrics.decisions.labels(priority.value, "queued").inc()
            self._metrics.wait.labels(priority.value).observe(admitted_s - waiter.since_s)
        return Ticket(self, lane, admitted_s, priority)

    # -- the slot's side -------------------------------------------------------------------------

    def released(
        self,
        lane: _Lane,
        since_s: float | None = None,
        priority: Priority = Priority.INTERACTIVE,
    ) -> None:
        """A slot came back; `since_s` is when it was taken (None: it never served).

        One admitted since the rooms were read gives its free slot back at once (one admitted
        before is in the room the next read finds)."""
        lane.active = max(0, lane.active - 1)
        lane.active_by[priority] = max(0, lane.active_by[priority] - 1)
        if lane.taken_by[priority] > 0:
            lane.taken_by[priority] -= 1
        now_s = asyncio.get_running_loop().time()
        if since_s is not None:
            held_s = now_s - since_s
            lane.hold_s = held_s if lane.hold_s is None else (
                lane.hold_s + HOLD_SMOOTHING * (held_s - lane.hold_s)
            )  # fmt: skip
        if lane.waiting():
            self._pump(lane, now_s)

    def queued(self) -> int:
        """Requests waiting now, every model and priority."""
        return sum(lane.queued() for lane in self._lanes.values())

    def active(self) -> int:
        """Admitted requests in progress, every model."""
        return sum(lane.active for lane in self._lanes.values())

    def forget_models_except(self, models: set[str]) -> None:
        """Drop idle lanes of models the table no longer serves (bounded by the table)."""
        for model in [m for m in self._lanes if m not in models]:
            lane = self._lanes[model]
            if lane.active == 0 and lane.queued() == 0:
                del self._lanes[model]

    def lanes(self) -> int:
        return len(self._lanes)

    # -- internals -------------------------------------------------------------------------------

    def _room(self, model: str, lane: _Lane | None, now_s: float) -> FleetRoom | None:
        """The interactive class's room (refreshing every class's on the lane when stale)."""
        if lane is not None and now_s - lane.checked_s < CAPACITY_TTL_S:
            return lane.room
        rooms: dict[Priority, FleetRoom] = {}
        for priority in Priority:
            found = self._room_of(model, priority.value)
            if found is None or found.capacity <= 0:
                rooms = {}
                break
            rooms[priority] = found
        room = rooms.get(Priority.INTERACTIVE)
        if lane is not None:
            lane.room, lane.rooms, lane.checked_s = room, rooms, now_s
            lane.taken_by = dict.fromkeys(Priority, 0)
        if room is not None and self._metrics is not None:
            self._metrics.capacity.set(room.capacity)
        return room

    def _limit(self, room: FleetRoom, priority: Priority) -> float:
        share = 1.0 if priority is Priority.INTERACTIVE else 1.0 - self.settings.batch_reserve
        return max(1.0, room.capacity * self.settings.capacity_factor * share) - room.others

    def _slots(self, lane: _Lane, priority: Priority) -> float:
        room = lane.rooms.get(priority)
        return 1.0 if room is None else self._limit(room, priority)

    def _draining(self, lane: _Lane, priority: Priority) -> float:
        """The slots the queue of `priority` drains through: the class's, but while no replica
        has free room for it only the requests running now (one of them must end first)."""
        slots = self._slots(lane, priority)
        room = lane.rooms.get(priority)
        if room is not None and room.free - self._taken(lane, priority) < 1.0:
            return min(slots, max(1.0, float(lane.active)))
        return slots

    @staticmethod
    def _load(lane: _Lane, priority: Priority) -> float:
        """Admitted requests in units of `priority`'s: each class's count × room(k) / room(j)."""
        room = lane.rooms.get(priority)
        if room is None:
            return float(lane.active)
        load = 0.0
        for other, count in lane.active_by.items():
            if count:
                other_room = lane.rooms.get(other, room)
                reserved = other is not priority and other_room.reserved > 0
                load += count if reserved else count * room.capacity / other_room.capacity
        return load

    def _fits(self, lane: _Lane, priority: Priority) -> bool:
        """Whether one more request of `priority` fits (no room known: it does)."""
        if not lane.rooms:
            return True
        room = lane.rooms.get(priority)
        if room is not None and room.free - self._taken(lane, priority) < 1.0:
            return False  # no replica would run it within its target now: it waits
        if room is not None and room.reserved > 0:
            held = room.reserved * self.settings.capacity_factor - room.others
            if lane.active_by[priority] < held:
                return True
        return self._load(lane, priority) < self._slots(lane, priority)

    @staticmethod
    def _taken(lane: _Lane, priority: Priority) -> int:
        """Admissions since the rooms were read that took from `priority`'s free room: its own,
        and the other classes' unless its room is on replicas reserved for it (they do not go
        there first)."""
        room = lane.rooms.get(priority)
        if room is not None and room.reserved > 0:
            return lane.taken_by[priority]
        return sum(lane.taken_by.values())

    @staticmethod
    def _apart(lane: _Lane) -> bool:
        """Whether interactive requests wait for replicas held for them alone (their room is
        reserved, `FleetRoom.reserved`): batch takes only what they leave there, so a batch
        request that fits elsewhere need not wait behind them."""
        room = lane.rooms.get(Priority.INTERACTIVE)
        return room is not None and room.reserved > 0

    def _ahead_of(self, lane: _Lane, priority: Priority) -> bool:
        """Whether someone waits who goes first (same class or higher, unless `_apart`)."""
        if priority is Priority.BATCH and lane.queues[Priority.BATCH]:
            return True
        if not lane.queues[Priority.INTERACTIVE]:
            return False
        return priority is Priority.INTERACTIVE or not self._apart(lane)

    def _position(self, lane: _Lane, priority: Priority) -> int:
        if priority is Priority.INTERACTIVE:
            return len(lane.queues[Priority.INTERACTIVE]) + 1
        position = len(lane.queues[Priority.BATCH]) + 1
        return position if self._apart(lane) else position + len(lane.queues[Priority.INTERACTIVE])

    def _predicted_wait_s(self, lane: _Lane, position: int, slots: float) -> float | None:
        """Seconds until the `position`-th waiter is served; None while nothing says.

        The rate is requests served from the queue over the last two queue timeouts (idle time
        in that window makes it lower, so the prediction errs towards refusing)."""
        served = lane.served
        if served:
            now_s = asyncio.get_running_loop().time()
            window_s = max(1.0, 2.0 * self.queue_timeout_s)
            while served and served[0] < now_s - window_s:
                served.popleft()
            if len(served) >= MIN_DEQUEUES:
                span_s = window_s if len(served) < MAX_SERVED else max(1e-3, now_s - served[0])
                return position * span_s / len(served)
        if lane.hold_s is not None:
            return position * lane.hold_s / max(1.0, slots)
        return None

    def _retry_s(self, lane: _Lane) -> float:
        wait_s = self._predicted_wait_s(
            lane, lane.queued() + 1, self._draining(lane, Priority.INTERACTIVE)
        )
        return self.queue_timeout_s if wait_s is None else max(wait_s, self.queue_timeout_s)

    def _make_room_in_queue(self, lane: _Lane, priority: Priority) -> None:
        """Refuse now if the queue is full; an interactive request displaces the newest batch."""
        if lane.queued() < self.settings.max_queue:
            return
        batch = lane.queues[Priority.BATCH]
        if priority is Priority.INTERACTIVE:
            while batch:
                displaced = batch.pop()
                self._waiting(lane, Priority.BATCH, -1)
                if not displaced.future.done():
                    displaced.future.set_exception(
                        self._refuse(Priority.BATCH, "refused_displaced", self._retry_s(lane))
                    )
                    self._depth(Priority.BATCH, len(batch))
                    return
        raise self._refuse(priority, "refused_queue_full", self._retry_s(lane))

    def _admitted(self, lane: _Lane, priority: Priority, now_s: float) -> Ticket:
        lane.taken_by[priority] += 1
        lane.active += 1
        lane.active_by[priority] += 1
        if self._admitted_counts is not None:
            self._admitted_counts[priority].inc()
        return Ticket(self, lane, now_s, priority)

    def _refuse(self, priority: Priority, reason: str, retry_after_s: float) -> Refused:
        if self._metrics is not None:
            self._metrics.decisions.labels(priority.value, reason).inc()
        return Refused(
            "The router is at capacity and cannot serve this request within its queue timeout;"
            " retry after the time in the Retry-After header.",
            retry_after_s=retry_after_s,
            reason=reason,
        )

    def _drop(self, lane: _Lane, waiter: _Waiter) -> None:
        """Take a waiter that gave up out of its queue; a slot it was handed goes back."""
        queue = lane.queues[waiter.priority]
        try:
            queue.remove(waiter)
        except ValueError:
            pass  # already woken (its -1 was reported then), or never queued
        else:
            self._waiting(lane, waiter.priority, -1)
        self._depth(waiter.priority, len(queue))
        future = waiter.future
        if future.done() and not future.cancelled() and future.exception() is None:
            self.released(lane, None, waiter.priority)  # woken as it timed out or was cancelled
        else:
            future.cancel()

    def _pump(self, lane: _Lane, now_s: float) -> None:
        """Wake waiters while there is room: every interactive one first, then batch."""
        self._room(lane.model, lane, now_s)
        for priority in (Priority.INTERACTIVE, Priority.BATCH):
            queue = lane.queues[priority]
            while queue:
                if not self._fits(lane, priority):
                    break
                waiter = queue.popleft()
                self._waiting(lane, priority, -1)
                if waiter.future.done():
                    continue
                lane.served.append(now_s)
                lane.taken_by[priority] += 1
                lane.active += 1
                lane.active_by[priority] += 1
                waiter.future.set_result(None)
            self._depth(priority, len(queue))
            if queue and not self._apart(lane):
                return  # batch waits while interactive requests do, where they share replicas

    def _schedule_pump(self) -> None:
        if self._pump_timer is None:
            loop = asyncio.get_running_loop()
            self._pump_timer = loop.call_later(PUMP_EVERY_S, self._pump_all)

    def _pump_all(self) -> None:
        self._pump_timer = None
        now_s = asyncio.get_running_loop().time()
        waiting = False
        for lane in self._lanes.values():
            if lane.queued():
                self._pump(lane, now_s)
                waiting = waiting or lane.queued() > 0
        if waiting:
            self._schedule_pump()

    def _waiting(self, lane: _Lane, priority: Priority, delta: int) -> None:
        if self._on_waiting is not None:
            self._on_waiting(lane.model, priority.value, delta)

    def _depth(self, priority: Priority, depth: int) -> None:
        if self._metrics is not None:
            self._metrics.queue_depth.labels(priority.value).set(depth)
