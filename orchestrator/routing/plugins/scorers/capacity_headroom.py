"""Scorer `capacity-headroom`: prefer the least utilised replica, measured against its capacity."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from orchestrator.routing.context import RequestContext
from orchestrator.routing.plugin import Candidate, PluginParams, RoutingView
from orchestrator.routing.plugins.params import parse_params
from orchestrator.routing.plugins.scorers.params import CapacityHeadroomParams
from orchestrator.routing.plugins.scorers.utilised import RatesByUtilisation
from orchestrator.routing.signals import DEFAULT_DEGRADED_CAPACITY_FACTOR


class CapacityHeadroomScorer(RatesByUtilisation):
    """score = 1 / (1 + ρ), ρ = (in_flight + others_in_flight + 1) / (C × h).

    C = `stats.concurrency_capacity(view.target_tpot_s)`: sequences the replica decodes at once
    within the TPOT target (its capacity in tokens/s × target TPOT in s). h =
    `degradedCapacityFactor` on a DEGRADED node, else 1. The + 1 counts the request being
    placed. Taking the maximum score equalises ρ across replicas, so each replica's share of the
    traffic is proportional to its capacity: an MI355X with k× the capacity of an MI300X (about
    4.6× by the fleet model's priors) gets k× the requests, without any branch on the generation.

    Type: capacity-headroom. Range (0, 1); 1/2 at ρ = 1.
    Parameters: degradedCapacityFactor (in (0, 1], default 0.5).
    """

    TYPE: ClassVar[str] = "capacity-headroom"

    def __init__(
        self,
        name: str | None = None,
        *,
        degraded_capacity_factor: float = DEFAULT_DEGRADED_CAPACITY_FACTOR,
    ) -> None:
        self.name = name or self.TYPE
        self.degraded_capacity_factor = degraded_capacity_factor

    @classmethod
    def from_params(cls, name: str, params: PluginParams) -> CapacityHeadroomScorer:
        parsed = parse_params(CapacityHeadroomParams, cls.TYPE, name, params)
        return cls(name, degraded_capacity_factor=parsed.degraded_capacity_factor)

    def score_utilised(
        self,
        ctx: RequestContext,
        view: RoutingView,
        candidates: Sequence[Candidate],
        rhos: Sequence[float],
    ) -> list[float]:
        return [1.0 / (1.0 + rho) for rho in rhos]
