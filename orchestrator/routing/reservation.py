"""Room on the fast replicas held for the tightest TPOT target in flight (goodput decisions).

One decode step serves a replica's whole batch, so a request with a tight TPOT target can only
be met where the batch is small. If loose-target (batch) work were free to fill every replica to
the batch its own target allows, the tight class would find no replica able to meet it. So,
while work with different TPOT targets is in flight, the replicas that hold the tight class's
in-flight requests (times a margin) at the tight target are *reserved*: their batch is held to
the tight target (`ReplicaStats.reserved_tpot_s`), loose work fills them only up to that batch,
and loose work soaks up the rest of the fleet at its own target. The fastest replicas (largest
batch within the tight target) are reserved first: a slow replica whose weight read eats most
of a tight target holds almost nothing within it, and is worth more to the loose class.

Pure: the router recomputes the choice when the tight class's in-flight count moves (`FleetState`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final

RESERVE_MARGIN: Final = 1.0  # reserve this multiple of the tight class's requests in flight
RESERVE_SLACK: Final = 1.0  # and this many sequences more: the next arrival must fit
DEMAND_BAND: Final = 0.1  # recompute once the demand moved this share (or one request) away


@dataclass(frozen=True, slots=True, eq=False)
class Reservation:
    """The TPOT target replicas are held to now (inf: none). A new one each time the choice is
    redone, so whoever narrows candidates by it may cache the result by its identity."""

    tpot_s: float = math.inf


NO_RESERVATION: Final = Reservation()


def reserved_replicas(
    tight_capacities: Sequence[float],
    demand: float,
    held: Collection[int] = (),
    margin: float = RESERVE_MARGIN,
) -> list[int]:
    """Indices of the replicas to reserve: those `held` already first, then the largest
    capacity within the tight target, until together they hold `demand × margin + 1` sequences
    (every replica if they never do); none without demand. Keeping the held ones matters: a
    replica newly reserved still runs a large loose batch, which the tight class would join."""
    if demand <= 0:
        return []
    need = demand * margin + RESERVE_SLACK
    order = sorted(
        range(len(tight_capacities)), key=lambda i: (i not in held, -tight_capacities[i])
    )
    chosen: list[int] = []
    total = 0.0
    for index in order:
        if total >= need:
            break
        chosen.append(index)
        total += tight_capacities[index]
    return chosen


def demand_moved(demand: float, at_last_choice: float) -> bool:
    """Whether the tight class's demand moved far enough from the last choice's to redo it."""
    return abs(demand - at_last_choice) > max(1.0, DEMAND_BAND * at_last_choice)
