"""Scorer `least-requests`: prefer the replica holding the fewest requests (baseline)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from orchestrator.routing.context import RequestContext
from orchestrator.routing.plugin import Candidate, PluginParams, RoutingView
from orchestrator.routing.plugins.params import PluginParamsModel, parse_params
from orchestrator.routing.signals import outstanding


class _Params(PluginParamsModel):
    pass


class LeastRequestsScorer:
    """score = 1 / (1 + in_flight + others_in_flight).

    Blind to capacity: it evens out request counts, so a fast and a slow replica get the same
    share. Kept as a baseline to compare `capacity-headroom` against.
    Type: least-requests. Range (0, 1]. Parameters: none.
    """

    TYPE: ClassVar[str] = "least-requests"

    def __init__(self, name: str | None = None) -> None:
        self.name = name or self.TYPE

    @classmethod
    def from_params(cls, name: str, params: PluginParams) -> LeastRequestsScorer:
        parse_params(_Params, cls.TYPE, name, params)
        return cls(name)

    def score(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> list[float]:
        return [1.0 / (1.0 + outstanding(c)) for c in candidates]
