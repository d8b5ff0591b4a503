"""A routing profile: filters, weighted scorers and a picker, run in that order.

    decision = picker(candidates after filters, sum_i weight_i * score_i / sum_i weight_i)

Filters are hard unless marked soft: a soft filter that would leave no candidate is skipped
(fail open), so a signal that condemns every replica narrows nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.routing.context import RequestContext
from orchestrator.routing.plugin import (
    Candidate,
    Decision,
    Filter,
    Picker,
    RequestObserver,
    RoutingView,
    Scorer,
)

MAX_FALLBACKS = 3


@dataclass(frozen=True, slots=True)
class FilterStep:
    plugin: Filter
    soft: bool = False


@dataclass(frozen=True, slots=True)
class ScorerStep:
    plugin: Scorer
    weight: float


class NoCandidateError(OrchestratorError):
    """Every replica was filtered out; `code` tells whether the model is unknown or just down."""


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    filters: tuple[FilterStep, ...]
    scorers: tuple[ScorerStep, ...]
    picker: Picker
    max_fallbacks: int = MAX_FALLBACKS

    def decide(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> Decision:
        """Choose a primary and fallbacks, or raise `NoCandidateError`."""
        remaining = list(candidates)
        for step in self.filters:
            narrowed = step.plugin.filter(ctx, view, remaining)
            if narrowed or not step.soft:
                remaining = narrowed
            if not remaining:
                raise self._nothing_left(ctx, candidates, step.plugin.name)
        scores = self._combined_scores(ctx, view, remaining)
        ordered = self.picker.pick(ctx, view, remaining, scores)
        primary = ordered[0].replica
        for plugin in (*(s.plugin for s in self.scorers), self.picker):
            if isinstance(plugin, RequestObserver):
                plugin.on_routed(ctx, primary)
        fallbacks = tuple(c.replica for c in ordered[1 : 1 + self.max_fallbacks])
        return Decision(primary=primary, fallbacks=fallbacks, profile=self.name)

    def _combined_scores(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> list[float]:
        if not self.scorers:
            return [0.0] * len(candidates)
        total = [0.0] * len(candidates)
        weights = 0.0
        for step in self.scorers:
            scores = step.plugin.score(ctx, view, candidates)
            weights += step.weight
            for index, value in enumerate(scores):
                total[index] += step.weight * min(1.0, max(0.0, value))
        return [value / weights for value in total] if weights > 0 else total

    @staticmethod
    def _nothing_left(
        ctx: RequestContext, candidates: Sequence[Candidate], filter_name: str
    ) -> NoCandidateError:
        if not any(c.replica.model == ctx.model for c in candidates):
            return NoCandidateError(
                ErrorCode.NOT_FOUND, f"The model `{ctx.model}` does not exist.", param="model"
            )
        return NoCandidateError(
            ErrorCode.UNAVAILABLE,
            f"no replica of `{ctx.model}` can take the request now ({filter_name} excluded all)",
        )
