"""Filter `slo-reserved`: requests of the tight class go to the replicas held for its target."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from orchestrator.routing.context import RequestContext
from orchestrator.routing.plugin import Candidate, PluginParams, RoutingView
from orchestrator.routing.plugins.params import PluginParamsModel, parse_params
from orchestrator.routing.reservation import Reservation


class _Params(PluginParamsModel):
    pass


class SloReservedFilter:
    """Keeps only the replicas reserved for the request's TPOT target
    (`stats.reserved_tpot_s == view.target_tpot_s`, `routing/reservation.py`) when any is;
    every candidate otherwise.

    The reservation holds enough of the fastest replicas for the tight class's requests in
    flight, plus one; sending one elsewhere would bind a replica that runs a large loose batch
    to the tight target (one batch, one step time): the tight request misses there, or the loose
    work is cut to the tight batch. A tight request with no room on its replicas waits in
    admission instead (`FleetRoom.free` counts the same replicas).

    A request with a looser target skips a reserved replica that has no room left for it
    (`ReplicaStats.room_for_looser`: the tight batch less what runs there and less the tight
    class's claim not yet in flight there): loose work placed there would push the batch past
    the tight target, or take the room the tight class's next requests need.

    Of the reserved replicas, a tight request skips those whose engine queues behind looser
    work (`ReplicaStats.queued_behind_looser`: one just reserved, still running a large loose
    batch), unless every one does.

    It narrows the primary only (`PrimaryOnlyFilter`): once the reserved replicas are used up as
    fallbacks, the other replicas follow, so a reserved replica that refuses or dies mid-stream
    costs the request its target, not its answer.

    Type: slo-reserved. Depends on the request's target. Parameters: none.
    """

    TYPE: ClassVar[str] = "slo-reserved"
    PRIMARY_ONLY: ClassVar[bool] = True

    def __init__(self, name: str | None = None) -> None:
        self.name = name or self.TYPE
        self._last: tuple[Candidate, ...] = ()
        self._cached: tuple[Sequence[Candidate], Reservation, Sequence[Candidate]] | None = None
        # for looser requests: (candidates, reservation, the reserved ones, the others)
        self._split: (
            tuple[Sequence[Candidate], Reservation, tuple[Candidate, ...], tuple[Candidate, ...]]
            | None
        ) = None

    @classmethod
    def from_params(cls, name: str, params: PluginParams) -> SloReservedFilter:
        parse_params(_Params, cls.TYPE, name, params)
        return cls(name)

    def filter(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> Sequence[Candidate]:
        """The same sequence back when nothing is reserved for the target (or everything is),
        and the same tuple for the same reserved replicas: scorers cache per candidate tuple (a
        hash ring, site indexes). With the fleet's reservation in the view, that costs O(1) but
        once per candidate list and reservation."""
        target = view.target_tpot_s
        reservation = view.reservation
        if reservation is None:
            narrowed = self._narrowed(candidates, target)
            if narrowed is not candidates:
                return _not_queued(narrowed)
            return _without_full(narrowed, target)
        if reservation.tpot_s < target:
            return self._looser(candidates, reservation)
        if reservation.tpot_s != target:
            return candidates
        cached = self._cached
        if cached is not None and cached[0] is candidates and cached[1] is reservation:
            return _not_queued(cached[2])
        narrowed = self._narrowed(candidates, target)
        self._cached = (candidates, reservation, narrowed)
        return _not_queued(narrowed)

    def _looser(
        self, candidates: Sequence[Candidate], reservation: Reservation
    ) -> Sequence[Candidate]:
        """Every candidate but the reserved ones without room for looser work; the reserved
        ones are found once per candidate list and reservation, then only they are read."""
        split = self._split
        if split is None or split[0] is not candidates or split[1] is not reservation:
            tight = reservation.tpot_s
            held: list[Candidate] = []
            rest: list[Candidate] = []
            for candidate in candidates:
                (held if candidate.stats.reserved_tpot_s == tight else rest).append(candidate)
            split = self._split = (candidates, reservation, tuple(held), tuple(rest))
        reserved, others = split[2], split[3]
        full = [c for c in reserved if c.stats.room_for_looser() < 1.0]
        if not full or (not others and len(full) == len(reserved)):
            return candidates  # room everywhere, or nowhere else to go
        if len(full) == len(reserved):
            return others
        skipped = {id(c) for c in full}
        return tuple(c for c in candidates if id(c) not in skipped)

    def _narrowed(self, candidates: Sequence[Candidate], target: float) -> Sequence[Candidate]:
        for candidate in candidates:  # the common case, nothing reserved, allocates nothing
            if candidate.stats.reserved_tpot_s == target:
                break
        else:
            return candidates
        reserved = tuple(c for c in candidates if c.stats.reserved_tpot_s == target)
        if len(reserved) == len(candidates):
            return candidates
        last = self._last
        if len(last) == len(reserved) and all(a is b for a, b in zip(last, reserved, strict=True)):
            return last
        self._last = reserved
        return reserved


def _without_full(candidates: Sequence[Candidate], target: float) -> Sequence[Candidate]:
    """`candidates` less the replicas reserved for a tighter target with no room for this
    one's work (the path without the fleet's reservation in the view: every stats read)."""
    full = [
        c
        for c in candidates
        if c.stats.reserved_tpot_s < target and c.stats.room_for_looser() < 1.0
    ]
    if not full or len(full) == len(candidates):
        return candidates
    skipped = {id(c) for c in full}
    return tuple(c for c in candidates if id(c) not in skipped)


def _not_queued(reserved: Sequence[Candidate]) -> Sequence[Candidate]:
    """The reserved replicas less those whose engine queues behind looser work (all of them if
    every one does); reads only the reserved ones."""
    for candidate in reserved:
        if candidate.stats.queued_behind_looser():
            break
    else:
        return reserved
    clear = tuple(c for c in reserved if not c.stats.queued_behind_looser())
    return clear or reserved
