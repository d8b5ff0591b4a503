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
            return self._narrowed(candidates, target)
        if reservation.tpot_s != target:
            return candidates
        cached = self._cached
        if cached is not None and cached[0] is candidates and cached[1] is reservation:
            return cached[2]
        narrowed = self._narrowed(candidates, target)
        self._cached = (candidates, reservation, narrowed)
        return narrowed

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
