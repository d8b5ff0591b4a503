"""Picker `round-robin`: each replica in turn, blind to load and capacity (baseline)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import ClassVar

from orchestrator.routing.context import RequestContext
from orchestrator.routing.memo import IdentityMemo
from orchestrator.routing.plugin import Candidate, PluginParams, RoutingView
from orchestrator.routing.plugins.params import PluginParamsModel, parse_params


class _Params(PluginParamsModel):
    pass


def _by_id(candidates: Sequence[Candidate]) -> tuple[list[str], list[Candidate]]:
    ordered = sorted(candidates, key=lambda c: c.replica.replica_id)
    return [c.replica.replica_id for c in ordered], ordered


class RoundRobinPicker:
    """Primary: the candidate whose replica id follows the last primary's, in id order, wrapping
    around. Fallbacks: the candidates after it in the same cycle. Scores are ignored.

    Following the last id rather than a counter keeps the cycle fair when replicas come and go.
    The first pick starts at the `reseed` salt's place in the cycle (the first id without one),
    so router processes sharing a fleet do not walk it in step.
    O(log n) per pick (the id order is built once per eligible tuple).
    Type: round-robin. Parameters: none.
    """

    TYPE: ClassVar[str] = "round-robin"
    WHOLE_SET: ClassVar[bool] = True

    def __init__(self, name: str | None = None) -> None:
        self.name = name or self.TYPE
        self._last_id: str | None = None
        self._salt = 0
        self._orders: IdentityMemo[Sequence[Candidate], tuple[list[str], list[Candidate]]] = (
            IdentityMemo()
        )

    @classmethod
    def from_params(cls, name: str, params: PluginParams) -> RoundRobinPicker:
        parse_params(_Params, cls.TYPE, name, params)
        return cls(name)

    def reseed(self, salt: int) -> None:
        self._salt = salt

    def pick(
        self,
        ctx: RequestContext,
        view: RoutingView,
        candidates: Sequence[Candidate],
        scores: Sequence[float],
        *,
        limit: int | None = None,
    ) -> list[Candidate]:
        ids, ordered = self._orders.get(candidates, _by_id)
        count = len(ordered)
        start = self._salt if self._last_id is None else bisect_right(ids, self._last_id)
        start %= count
        wanted = count if limit is None else min(limit, count)
        chosen = [ordered[(start + step) % count] for step in range(wanted)]
        self._last_id = chosen[0].replica.replica_id
        return chosen
