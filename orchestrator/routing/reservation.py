"""Room on the fast replicas held for the tightest TPOT target in flight (goodput decisions).

One decode step serves a replica's whole batch, so a request with a tight TPOT target can only
be met where the batch is small. If loose-target (batch) work were free to fill every replica to
the batch its own target allows, the tight class would find no replica able to meet it. So,
while work with different TPOT targets is in flight, the replicas that hold the tight class's
requests in flight or waiting in admission (times a margin) at the tight target are *reserved*:
their batch is held to the tight target (`ReplicaStats.reserved_tpot_s`), the tight class claims
its share of them (`tight_claim`, in proportion to each one's batch within the tight target),
loose work takes only what is left over (`ReplicaStats.room_for_looser`), and loose work soaks
up the rest of the fleet at its own target. The fastest replicas (largest
batch within the tight target) are reserved first: a slow replica whose weight read eats most
of a tight target holds almost nothing within it, and is worth more to the loose class.

A replica is taken once the others no longer hold the tight class's need (its demand plus one),
and a held one is let go only once the others hold its whole claim (the need and the count's
swings): a replica handed back fills with loose work at once, and taking it again means waiting
for that work to end. (The router also waits a loose request's life before it lets one go:
`FleetState`.) The count's swings are the hysteresis; a quarter more on top held a second
fast replica for good whenever the demand sat near one's tight batch, leaving loose work the
slow replicas and the reserved pair's leftovers.

Pure: the router recomputes the choice when the tight class's demand moves (`FleetState`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final

RESERVE_MARGIN: Final = 1.0  # reserve this multiple of the tight class's requests in flight
RESERVE_SLACK: Final = 1.0  # and this many sequences more: the next arrival must fit
# the tight class's claim on them adds this many standard deviations of a Poisson count: loose
# work admitted into a dip in its demand would hold the room for a whole loose request's life
CLAIM_SPREAD: Final = 2.0
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
    tight_in_flight: Sequence[int] = (),
) -> list[int]:
    """Indices of the replicas to reserve: those `held` already first, then the largest
    capacity within the tight target, until together they hold `demand × margin + 1` sequences
    (every replica if they never do); none without demand. Keeping the held ones matters: a
    replica newly reserved still runs a large loose batch, which the tight class would join; so
    a held one is dropped only once those before it hold the claim (the need and the count's
    swings, `claim_need`), and of the held ones, those running the most tight requests
    (`tight_in_flight`) are kept first."""
    if demand <= 0:
        return []
    need = tight_need(demand, margin)
    release = need + CLAIM_SPREAD * math.sqrt(demand)  # the claim at this margin
    running = tight_in_flight or [0] * len(tight_capacities)
    order = sorted(
        range(len(tight_capacities)),
        key=lambda i: (i not in held, -running[i] if i in held else 0, -tight_capacities[i]),
    )
    chosen: list[int] = []
    total = 0.0
    for index in order:
        if total >= (release if index in held else need):
            break
        chosen.append(index)
        total += tight_capacities[index]
    return chosen


def tight_need(demand: float, margin: float = RESERVE_MARGIN) -> float:
    """Sequences the reservation holds for `demand` tight requests (in flight and waiting)."""
    return demand * margin + RESERVE_SLACK if demand > 0 else 0.0


def claim_need(demand: float) -> float:
    """Sequences the tight class claims over the reserved replicas: `tight_need(demand)` plus
    `CLAIM_SPREAD` × √demand for a Poisson count's swings."""
    return tight_need(demand) + CLAIM_SPREAD * math.sqrt(demand) if demand > 0 else 0.0


def claims(tight_capacities: Sequence[float], demand: float) -> list[float]:
    """The tight class's claim on each reserved replica (`claim_need`), shared in proportion
    to each one's batch within the tight target (as the capacity scorer spreads the tight
    work), each at most that batch."""
    need = claim_need(demand)
    total = sum(tight_capacities)
    if total <= 0:
        return [0.0 for _ in tight_capacities]
    share = min(1.0, need / total)
    return [share * capacity for capacity in tight_capacities]


def demand_moved(demand: float, at_last_choice: float) -> bool:
    """Whether the tight class's demand moved far enough from the last choice's to redo it."""
    return abs(demand - at_last_choice) > max(1.0, DEMAND_BAND * at_last_choice)
