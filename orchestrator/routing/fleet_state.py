"""The router's live state of the fleet: one `ReplicaStats` per replica, kept across table updates,
and the bookkeeping the forwarder does around each request, including which replicas are held to
the tightest TPOT target in flight (`routing/reservation.py`; fleet-wide, the one-model case)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from orchestrator.config.router_timing import DEFAULT_LOAD_STALE_AFTER_S
from orchestrator.core.records import Replica, ReplicaLoad, ReplicaState
from orchestrator.core.slo import MLPERF_TPOT_S
from orchestrator.routing.in_flight_history import InFlightHistory
from orchestrator.routing.others_estimate import OthersEstimate
from orchestrator.routing.plugin import Candidate
from orchestrator.routing.reservation import (
    NO_RESERVATION,
    Reservation,
    claims,
    demand_moved,
    reserved_replicas,
)
from orchestrator.routing.stats import ReplicaStats
from orchestrator.table.snapshot import RoutingTable

LATENCY_SMOOTHING = 0.2  # weight of the newest observation in the latency averages
DEFAULT_LOOSE_LIFE_S = 30.0  # a loose request's life before one was measured (1,300 tokens)
LIFE_SMOOTHING = 0.05  # weight of one finished loose request in their mean life


class FleetState:
    """Stats by replica id. New replicas start from their prior; vanished ones are dropped."""

    def __init__(
        self,
        reference_tpot_s: float = MLPERF_TPOT_S,
        *,
        clock: Callable[[], float] | None = None,
        history_s: float = DEFAULT_LOAD_STALE_AFTER_S,
    ) -> None:
        """`reference_tpot_s` (wall seconds): the TPOT target the table's capacity priors are at.
        With `clock` (the router's), each replica's in-flight of the last `history_s` is kept, so a
        report scraped a moment ago is set against what this router had in flight then
        (`reported`); without, against what it has now (the virtual fleet, whose reports are read
        as they are scraped)."""
        self.reference_tpot_s = reference_tpot_s
        self._clock = clock
        self._history_s = history_s
        self._history: dict[str, InFlightHistory] = {}
        self._others = OthersEstimate(history_s) if clock is not None else None
        self._ready_models: dict[str, str] = {}  # ready replicas' model by id, for `_others`
        self._stats: dict[str, ReplicaStats] = {}
        self._candidates: tuple[RoutingTable, list[Candidate]] | None = None
        self._in_flight_by_tpot: dict[float, int] = {}  # every replica's, by TPOT target
        self._waiting_by_tpot: dict[float, int] = {}  # waiting in admission, by TPOT target
        self._reserved: list[ReplicaStats] = []  # the replicas `_reserve` chose last
        self._reserved_for: tuple[float, float] | None = None  # (target, demand) last chosen at
        self.reservation: Reservation = NO_RESERVATION  # what `_reserve` chose last
        self._not_ready: set[str] = set()  # replicas the table has draining (never reserved)
        # since when (router clock) the choice has wanted to let each held replica go, by id;
        # the first moment one of those waits is over; and how long a request looser than the
        # reserved target lives (smoothed), the time a held replica waits before it goes
        self._release_wanted: dict[str, float] = {}
        self._release_due_s = math.inf
        self._loose_life_s = DEFAULT_LOOSE_LIFE_S
        self.circuit_changes = 0  # circuits opened or closed so far (what is routable moved)

    def sync(self, table: RoutingTable) -> None:
        """Match the stats to `table`'s replicas (called whenever the table changes)."""
        live = {r.replica_id for r in table.replicas}
        self._ready_models = {
            r.replica_id: r.model for r in table.replicas if r.state is ReplicaState.READY
        }
        self._not_ready = {
            r.replica_id for r in table.replicas if r.state is not ReplicaState.READY
        }
        for replica_id in list(self._stats):
            if replica_id not in live:
                del self._stats[replica_id]
                self._history.pop(replica_id, None)
                if self._others is not None:
                    self._others.forget(replica_id)
        for replica in table.replicas:
            if replica.replica_id not in self._stats:
                self._stats[replica.replica_id] = self._new(replica)
        self._candidates = None
        self._reserved_for = None
        self._reserve()

    def _new(self, replica: Replica) -> ReplicaStats:
        return ReplicaStats(
            replica.capacity_prior_tokens_per_s, reference_tpot_s=self.reference_tpot_s
        )

    def stats(self, replica_id: str) -> ReplicaStats | None:
        return self._stats.get(replica_id)

    def candidates(self, table: RoutingTable) -> list[Candidate]:
        """Candidates for `table`, the same list object while the table stays the same.

        Profiles cache their filter results by the list's identity, and the stats inside are
        updated in place, so handing out one list per table keeps every request cheap.
        """
        cached = self._candidates
        if cached is not None and cached[0] is table:
            return cached[1]
        out = []
        for replica in table.replicas:
            stats = self._stats.get(replica.replica_id)
            if stats is None:
                stats = self._stats[replica.replica_id] = self._new(replica)
            out.append(Candidate(replica, stats))
        self._candidates = (table, out)
        return out

    def routable_per_model(self, replicas: Sequence[Replica]) -> dict[str, int]:
        """Ready replicas with a closed circuit, per model (as `/ready` counts them)."""
        counts = {replica.model: 0 for replica in replicas}
        for replica in replicas:
            stats = self._stats.get(replica.replica_id)
            if replica.state is ReplicaState.READY and stats is not None and not stats.circuit_open:
                counts[replica.model] += 1
        return counts

    def circuit_changed(self, replica_id: str, is_open: bool) -> None:
        """Mirror a circuit (`forwarding/breaker.py`): routing skips the replica while it is open.
        A reserved replica whose circuit opens is replaced at once, and one that closes may be
        chosen again; other changes leave the reservation as it is."""
        stats = self._stats.get(replica_id)
        if stats is None or stats.circuit_open is is_open:
            return
        stats.circuit_open = is_open
        self.circuit_changes += 1
        if self.reservation is NO_RESERVATION:
            return
        if not is_open or stats.reserved_tpot_s == self.reservation.tpot_s:
            self._reserved_for = None
            self._reserve()

    # -- the forwarder's bookkeeping -----------------------------------------------------------

    def started(self, replica: Replica, target_tpot_s: float = MLPERF_TPOT_S) -> None:
        """A request with this TPOT target (wall s) went to `replica`."""
        stats = self._stats.get(replica.replica_id)
        if stats is not None:
            stats.in_flight += 1
            stats.started_total += 1
            stats.count_in(target_tpot_s)
            self._log(replica.replica_id, stats.in_flight)
        # Counted whether or not the replica is still in the table: the forwarder finishes every
        # request it started, and `finished` takes it back the same way.
        self._count(target_tpot_s, 1)

    def first_token(self, replica: Replica, ttft_s: float) -> float | None:
        """Records the TTFT; returns the requests the replica runs now (`finished` takes it
        back: a TPOT is the batch's between the first token and the last)."""
        stats = self._stats.get(replica.replica_id)
        if stats is None:
            return None
        stats.ttft_s = _smooth(stats.ttft_s, ttft_s)
        return stats.in_flight + stats.others

    def finished(
        self,
        replica: Replica,
        *,
        ok: bool,
        output_tokens: int,
        tpot_s: float | None,
        target_tpot_s: float = MLPERF_TPOT_S,
        running_at_first_token: float | None = None,
        started_s: float = -math.inf,
    ) -> None:
        """`started_s` (router clock): when the request was sent; -inf, before any report."""
        self._count(target_tpot_s, -1)  # also for a replica that left the table meanwhile
        stats = self._stats.get(replica.replica_id)
        if stats is None:
            return
        stats.in_flight = max(0, stats.in_flight - 1)
        stats.count_out(target_tpot_s)
        self._log(replica.replica_id, stats.in_flight)
        stats.finished_total += 1
        stats.output_tokens_total += output_tokens
        if not ok:
            stats.failed_total += 1
        reserved_for, clock = self._reserved_for, self._clock
        loose = ok and reserved_for is not None and target_tpot_s > reserved_for[0]
        if loose and clock is not None and started_s > -math.inf:  # how long one holds a replica
            self._loose_life_s += LIFE_SMOOTHING * (clock() - started_s - self._loose_life_s)
        if tpot_s is not None:
            stats.tpot_s = _smooth(stats.tpot_s, tpot_s)
        if tpot_s is not None and ok:
            # its TPOT at the mean of what the replica ran from its first token to its last
            # (itself included, before it left); a failed, stalled or abandoned stream's time
            # per token is not the batch's step (5 tokens cut by the 30 s stall timeout read 7.5 s)
            running = float(stats.in_flight + 1 + stats.others)
            if running_at_first_token is not None:
                running = (running + running_at_first_token) / 2
            stats.step_curve.observe(running, tpot_s)

    def reported(
        self,
        replica_id: str,
        load: ReplicaLoad | None,
        *,
        now_s: float,
        stale_after_s: float = DEFAULT_LOAD_STALE_AFTER_S,
        problem: str = "",
    ) -> ReplicaStats | None:
        """Take a load report read at `now_s` (router clock): `load` was observed at its
        `observed_at_s` on the same clock and stays known until `stale_after_s` after that.

        `others` is fixed here, as the engine's requests minus what this router had in flight
        when the load was observed (now, without a clock); what this router sends later adds to
        its own in-flight, so decisions between two reports count it. `None` (with the adapter's
        `problem`) makes the load unknown at once; the last figure of `others` is kept. Returns
        the stats, `None` for a replica not in the table.
        """
        stats = self._stats.get(replica_id)
        if stats is None:
            return None
        if load is None:
            stats.load = None
            stats.load_known_until_s = -math.inf
            stats.load_problem = problem
            if self._others is not None:
                self._others.forget(replica_id)
            return stats
        stats.load = load
        own = self._own_at(replica_id, load, stats)
        others = max(0, load.running + load.waiting - own)
        stats.others = float(others)
        if self._others is not None:
            self._others.reported(replica_id, others, own, load.observed_at_s)
        stats.load_known_until_s = min(load.observed_at_s, now_s) + stale_after_s
        stats.load_problem = ""
        return stats

    def reports_taken(self, now_s: float) -> None:
        """After a batch of `reported` calls: other routers' share is re-estimated from them
        (`routing/others_estimate.py`; with a clock only)."""
        if self._others is not None:
            self._others.rebase(now_s, self._stats, self._ready_models)

    def _log(self, replica_id: str, in_flight: int) -> None:
        if self._clock is None:
            return
        history = self._history.get(replica_id)
        if history is None:
            history = self._history[replica_id] = InFlightHistory(self._history_s)
        history.changed(self._clock(), in_flight)

    def _own_at(self, replica_id: str, load: ReplicaLoad, stats: ReplicaStats) -> int:
        history = self._history.get(replica_id)
        return stats.in_flight if history is None else history.at(load.observed_at_s)

    def waiting(self, tpot_s: float, delta: int) -> None:
        """`delta` requests with this TPOT target (wall s) began (+) or ended (−) waiting in
        admission: the tight class's demand counts them, so the reservation grows for them
        rather than staying at the size the requests let in so far fit."""
        _move(self._waiting_by_tpot, tpot_s, delta)
        self._reserve()

    def _count(self, tpot_s: float, delta: int) -> None:
        _move(self._in_flight_by_tpot, tpot_s, delta)
        self._reserve()

    def _reserve(self) -> None:
        """Hold the fastest replicas to the tightest TPOT target in flight or waiting while
        looser work is too; redone when that target changes or its demand (in flight and
        waiting) moves out of its band. The tight class's claim on each is kept current."""
        counts, waiting = self._in_flight_by_tpot, self._waiting_by_tpot
        targets = counts.keys() | waiting.keys() if waiting else counts.keys()
        tight = min(targets) if len(targets) > 1 else math.inf
        demand = float(counts.get(tight, 0) + waiting.get(tight, 0)) if tight < math.inf else 0.0
        last = self._reserved_for
        if last is not None and last[0] == tight and not demand_moved(demand, last[1]):
            due = self._release_due_s  # a held replica's wait to be let go may be over
            if due == math.inf or self._clock is None or self._clock() < due:
                self._claim(tight, demand)
                return
        self._reserved_for = (tight, demand)
        every = list(self._stats.values())
        not_ready = self._not_ready
        usable: list[ReplicaStats] = []
        usable_ids: list[str] = []
        for replica_id, stats in self._stats.items():
            if not stats.circuit_open and replica_id not in not_ready:
                usable.append(stats)
                usable_ids.append(replica_id)
        held = {i for i, stats in enumerate(usable) if stats.reserved_tpot_s == tight}
        capacities = [stats.concurrency_capacity(tight) for stats in usable] if demand else []
        for stats in every:
            stats.reserved_tpot_s = math.inf
            stats.tight_claim = 0.0
        running = [stats.in_flight_by_tpot.get(tight, 0) for stats in usable] if held else []
        chosen = self._held_a_while(
            reserved_replicas(capacities, demand, held, tight_in_flight=running),
            held,
            usable_ids,
            demand,
        )
        for index in chosen:
            usable[index].reserved_tpot_s = tight
        self._reserved = [usable[index] for index in chosen]
        self.reservation = Reservation(tight) if chosen else NO_RESERVATION
        self._claim(tight, demand)

    def _held_a_while(
        self, chosen: list[int], held: set[int], ids: list[str], demand: float
    ) -> list[int]:
        """`chosen`, plus each held replica it lets go (index into `ids`) until the choice has
        wanted to let that one go for a loose request's life (the smoothed life of the last few
        dozen that finished well; `DEFAULT_LOOSE_LIFE_S` before any): a replica handed back
        fills with loose work that holds it that long, so letting it go on a dip in the tight
        demand, or on a jump in another replica's batch within the tight target as its curve
        is re-read, costs the tight class the replica for a whole loose life when the demand
        comes back. A replica the choice keeps again starts its wait afresh next time. Once
        no tight request is in flight or waiting, or without the router's clock (the virtual
        fleet), a replica is let go at once: there is no tight work left on it to protect."""
        clock = self._clock
        dropped = [i for i in sorted(held) if i not in chosen] if demand > 0 else []
        wanted = self._release_wanted
        if not dropped or clock is None:
            wanted.clear()
            self._release_due_s = math.inf
            return chosen
        now_s = clock()
        life_s = self._loose_life_s
        kept: list[int] = []
        still: dict[str, float] = {}
        for index in dropped:
            replica_id = ids[index]
            since = wanted.get(replica_id, now_s)
            if now_s - since < life_s:
                kept.append(index)
                still[replica_id] = since
        self._release_wanted = still
        self._release_due_s = min(still.values(), default=math.inf) + life_s
        return chosen + kept

    def _claim(self, tight: float, demand: float) -> None:
        """Spread the tight class's need over the reserved replicas (`reservation.claims`)."""
        reserved = self._reserved
        if not reserved:
            return
        capacities = [stats.concurrency_capacity(tight) for stats in reserved]
        for stats, claim in zip(reserved, claims(capacities, demand), strict=True):
            stats.tight_claim = claim


def _move(counts: dict[float, int], tpot_s: float, delta: int) -> None:
    left = counts.get(tpot_s, 0) + delta
    if left > 0:
        counts[tpot_s] = left
    else:
        counts.pop(tpot_s, None)


def _smooth(previous: float | None, value: float) -> float:
    return value if previous is None else previous + LATENCY_SMOOTHING * (value - previous)
