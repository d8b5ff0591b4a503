"""Live, per-replica facts the router keeps between table updates: in flight, latency, capacity.

One `ReplicaStats` per replica id, owned by the router process. The forwarder counts requests in
and out and records their latencies; the engine's last `ReplicaLoad` arrives from the control
plane's routing table (or this router's own scraper, in file-fed mode) through
`FleetState.reported`; the capacity estimator writes `capacity_tokens_per_s` and `step_fixed_s`
(the control plane's estimate replaces the capacity in the first case). Plugins only read.

Capacity against a request's own TPOT target: a decode step takes a fixed time `a` (reading the
weights) plus `s` per running sequence (its decode and its share of prefill), so the batch whose
step stays within a share H of a target T is

    sequences(T) = (H·T − a) / s,    H = SLO_HEADROOM,

capped at the batch the engine stops at once one was seen, and at least 1. Once a step time was
measured at a running batch B_m (step t_m), the line is anchored there instead:

    sequences(T) = B_m + (H·T − t_m) / s,

so the batch grows while the measured step stays within the target and shrinks once it is over
it, whatever the curve's shape further away (a mixture-of-experts step rises steeply over the
first few sequences and flatly after, which a straight line through both underestimates). Once
requests finished there, the batch is read off the TPOT they got at each number in flight
instead, and past the largest measured one the line runs from there (`routing/step_curve.py`). At
the reference target T0 (the one capacities are stated at) it is C0 · T0, Little's law, as the
scorers have always used. The estimator publishes a, s, the measured point and the limit from its
fit of the replica's step times; before it has, they come from the capacity prior (a tenth of
the step fixed). A replica whose weight read eats most of a tight target takes only a small
batch within it, and a large one within a loose target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

from orchestrator.core.records import ReplicaLoad
from orchestrator.core.slo import MLPERF_TPOT_S
from orchestrator.routing.step_curve import StepCurve

HEADROOM: Final = 0.85  # aim the mean step below the target: p99 TPOT sits above the mean
# The share of another target the batch is scaled to: admission caps each replica's batch at its
# room, so the batch (and the step) cannot overshoot it the way a free-running load does, and on
# the flat part of a step curve a time headroom would cost a large share of the batch.
SLO_HEADROOM: Final = 0.95
FIXED_SHARE_PRIOR: Final = 0.1  # prior share of the step target spent on the fixed (weight) read
# an engine queue this long (or 2% of its batch) is past the wait for a prefill slot: its batch
# is at the engine's limit (as the estimator reads a batch limit, `routing/estimator.py`)
ENGINE_QUEUE_FLOOR: Final = 3


@dataclass(slots=True)
class ReplicaStats:
    """Mutable, router-local view of one replica. Times in seconds, rates in output tokens/s."""

    capacity_tokens_per_s: float
    in_flight: int = 0
    started_total: int = 0
    finished_total: int = 0
    failed_total: int = 0
    output_tokens_total: int = 0
    ttft_s: float | None = None  # exponentially weighted, from completed requests
    tpot_s: float | None = None
    load: ReplicaLoad | None = None  # the engine's last readable load; None while unknown
    # Requests the engine held, by that load, that this router had not sent: other routers'.
    # Fixed at the report, so what this router sends after it adds on top (see `outstanding`);
    # less the other routers' share of the replica's skew where there are other routers
    # (`routing/others_estimate.py`), so not a whole number then.
    others: float = 0.0
    # Until when (router clock) the load counts as known: inf before any report (no data is not
    # bad data), -inf while the engine's page is an adapter error (`load_problem` says which).
    load_known_until_s: float = math.inf
    load_problem: str = ""
    circuit_open: bool = False
    reference_tpot_s: float = MLPERF_TPOT_S  # the TPOT target `capacity_tokens_per_s` is at
    step_fixed_s: float | None = None  # fitted weight-read time of a step; None: the prior's
    step_per_sequence_s: float | None = None  # fitted step time per running sequence
    batch_limit: float | None = None  # the batch the engine stopped at, once seen
    measured_batch: float | None = None  # the running batch of the last measured step
    measured_step_s: float | None = None
    # requests in flight per TPOT target (wall s): the tightest one binds the whole batch
    in_flight_by_tpot: dict[float, int] = field(default_factory=dict)
    tightest_tpot_s: float = math.inf
    # the tight target this replica's batch is held to for the tight class (routing/reservation.py)
    reserved_tpot_s: float = math.inf
    # sequences of that batch the tight class claims here: its demand's share (reservation.claims)
    tight_claim: float = 0.0
    # the steps measured at each running batch (the estimator's): other targets' batch is read
    # off them where the replica has run near it (routing/step_curve.py)
    step_curve: StepCurve = field(default_factory=StepCurve)

    def concurrency_capacity(self, target_tpot_s: float) -> float:
        """Sequences it can decode at once within the TPOT target (see the module docstring)."""
        reference = self.reference_tpot_s
        at_reference = self.capacity_tokens_per_s * reference
        if target_tpot_s == reference:
            return at_reference if at_reference > 1.0 else 1.0
        fixed, per_sequence = self.step_fixed_s, self.step_per_sequence_s
        if fixed is None or per_sequence is None:
            step = HEADROOM * reference
            fixed = FIXED_SHARE_PRIOR * step
            per_sequence = (step - fixed) / max(1.0, self.capacity_tokens_per_s * step)
        measured_batch, measured_step = self.measured_batch, self.measured_step_s
        measured = self.step_curve.batch_within(SLO_HEADROOM * target_tpot_s, per_sequence)
        if measured is not None:
            sequences = measured
        elif measured_batch is not None and measured_step is not None:
            sequences = (
                measured_batch + (SLO_HEADROOM * target_tpot_s - measured_step) / per_sequence
            )
        else:
            sequences = (SLO_HEADROOM * target_tpot_s - fixed) / per_sequence
        limit = self.batch_limit
        if limit is not None and sequences > limit:
            sequences = limit
        return sequences if sequences > 1.0 else 1.0

    def binding_tpot_s(self, target_tpot_s: float) -> float:
        """The TPOT target the replica's batch must meet if it takes a request with this one: the
        tightest in flight there, or the one the replica is reserved for, if tighter."""
        tightest = self.tightest_tpot_s
        if self.reserved_tpot_s < tightest:
            tightest = self.reserved_tpot_s
        return tightest if tightest < target_tpot_s else target_tpot_s

    def room_for_looser(self, capacity_factor: float = 1.0) -> float:
        """Sequences work with a looser target than the one this replica is reserved for may
        still add here: its batch within the tight target (times `capacity_factor`), but no
        more than the largest batch it was measured to hold within it (an extrapolated one
        that proves too large is corrected only when the loose requests it let in end, 20 to 50
        s later), less what runs here, less the part of the tight class's claim not in flight
        here yet. Unbounded while not reserved. Loose work past it would either push the batch
        past the tight target or take the room the tight class's next (or waiting) requests
        need."""
        tight = self.reserved_tpot_s
        if tight == math.inf:
            return math.inf
        unclaimed = self.tight_claim - self.in_flight_by_tpot.get(tight, 0)
        running = self.in_flight + self.others
        sequences = self.concurrency_capacity(tight)
        seen = self.step_curve.batch_seen_within(SLO_HEADROOM * tight)
        if seen is not None and seen < sequences:
            sequences = seen if seen > 1.0 else 1.0
        room = sequences * capacity_factor - running
        return room - unclaimed if unclaimed > 0 else room

    def queued_behind_looser(self) -> bool:
        """Whether a request with the target this replica is reserved for would queue in its
        engine behind looser work: the engine's last load shows a queue past a prefill's wait
        while looser work runs here. Such a replica was just reserved, or its batch is at the
        engine's limit, and its batch within the tight target is read off in-flight counts
        that include that queue, so it overstates the room: the tight class waits for it."""
        load = self.load
        if load is None or load.waiting < max(ENGINE_QUEUE_FLOOR, 0.02 * load.running):
            return False
        tight = self.reserved_tpot_s
        return any(tpot_s > tight for tpot_s in self.in_flight_by_tpot)

    def count_in(self, tpot_s: float) -> None:
        """One more request in flight with this TPOT target."""
        self.in_flight_by_tpot[tpot_s] = self.in_flight_by_tpot.get(tpot_s, 0) + 1
        if tpot_s < self.tightest_tpot_s:
            self.tightest_tpot_s = tpot_s

    def count_out(self, tpot_s: float) -> None:
        left = self.in_flight_by_tpot.get(tpot_s, 0) - 1
        if left > 0:
            self.in_flight_by_tpot[tpot_s] = left
            return
        self.in_flight_by_tpot.pop(tpot_s, None)
        if tpot_s <= self.tightest_tpot_s:
            self.tightest_tpot_s = min(self.in_flight_by_tpot, default=math.inf)

    def others_in_flight(self) -> float:
        """Requests the engine runs or queues that this router did not send (other routers), as
        of the last report; a stale report keeps its figure rather than reading as idle."""
        return self.others

    def load_known(self, now_s: float) -> bool:
        """Whether the last load may be believed at `now_s` (not stale, not an adapter error)."""
        return now_s <= self.load_known_until_s
