"""The one `score()` of the scorers that rate candidates from their utilisations ρ."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.routing.context import RequestContext
from orchestrator.routing.plugin import Candidate, RoutingView
from orchestrator.routing.signals import utilisations


class RatesByUtilisation:
    """Base of a `UtilisationScorer`: scoring alone computes ρ and rates from it, so `score()`
    equals `score_utilised()` by construction (a profile hands every such scorer one shared ρ)."""

    degraded_capacity_factor: float

    def score(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> list[float]:
        rhos = utilisations(candidates, view.target_tpot_s, self.degraded_capacity_factor)
        return self.score_utilised(ctx, view, candidates, rhos)

    def score_utilised(
        self,
        ctx: RequestContext,
        view: RoutingView,
        candidates: Sequence[Candidate],
        rhos: Sequence[float],
    ) -> list[float]:
        raise NotImplementedError
