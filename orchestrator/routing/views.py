"""The records a routing decision passes to every plugin: candidates, the view, the decision.

Compiled (`orchestrator/_compiled.py`), so the compiled plugins read their fields as C struct
members: a decision reads `candidate.stats`, `candidate.replica` and the view's targets dozens
of times. `routing/plugin.py`, which stays interpreted (its protocols are `runtime_checkable`),
re-exports them. Each `__init__` is written out: the one `dataclasses` writes stays
interpreted even here, and a view is made for every request.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.core.records import Replica
from orchestrator.routing.reservation import Reservation
from orchestrator.routing.stats import ReplicaStats
from orchestrator.table.snapshot import RoutingTable


@dataclass(frozen=True, slots=True, init=False)
class Candidate:
    """A replica with its live stats, as plugins see it."""

    replica: Replica
    stats: ReplicaStats

    def __init__(self, replica: Replica, stats: ReplicaStats) -> None:
        setter = object.__setattr__
        setter(self, "replica", replica)
        setter(self, "stats", stats)


@dataclass(frozen=True, slots=True, init=False)
class RoutingView:
    """What a decision may consult beyond the candidates: the table and the latency targets.

    Targets are in wall-clock seconds (already scaled for slowed-down simulated fleets).
    `reservation` is the fleet's current one (`FleetState.reservation`); None where the caller
    keeps none, and then the candidates' stats are read for it.
    """

    table: RoutingTable
    target_ttft_s: float
    target_tpot_s: float
    now_s: float
    reservation: Reservation | None = None

    def __init__(
        self,
        table: RoutingTable,
        target_ttft_s: float,
        target_tpot_s: float,
        now_s: float,
        reservation: Reservation | None = None,
    ) -> None:
        setter = object.__setattr__
        setter(self, "table", table)
        setter(self, "target_ttft_s", target_ttft_s)
        setter(self, "target_tpot_s", target_tpot_s)
        setter(self, "now_s", now_s)
        setter(self, "reservation", reservation)


@dataclass(frozen=True, slots=True, init=False)
class Decision:
    """Where a request goes: `primary`, then `fallbacks` in order if it fails before a token."""

    primary: Replica
    fallbacks: tuple[Replica, ...]
    profile: str

    def __init__(self, primary: Replica, fallbacks: tuple[Replica, ...], profile: str) -> None:
        setter = object.__setattr__
        setter(self, "primary", primary)
        setter(self, "fallbacks", fallbacks)
        setter(self, "profile", profile)
