"""Picker `max-score`: the best combined score wins; ties are broken at random."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import ClassVar

from orchestrator.routing.context import RequestContext
from orchestrator.routing.plugin import Candidate, PluginParams, RoutingView, salt_rng
from orchestrator.routing.plugins.params import PluginParamsModel, parse_params

TIE_TOLERANCE = 1e-9


class _Params(PluginParamsModel):
    seed: int = 0


class MaxScorePicker:
    """Primary: a uniformly random one of the candidates whose score is within 1e-9 of the best
    (random, so equal replicas share the load instead of the first one taking it all).
    Fallbacks: the other candidates by score, highest first (equal scores keep input order).

    Type: max-score. Parameters: seed (int, default 0) for the tie-break.
    """

    TYPE: ClassVar[str] = "max-score"

    def __init__(self, name: str | None = None, *, rng: random.Random | None = None) -> None:
        self.name = name or self.TYPE
        self._rng = rng or random.Random(0)

    @classmethod
    def from_params(cls, name: str, params: PluginParams) -> MaxScorePicker:
        parsed = parse_params(_Params, cls.TYPE, name, params)
        return cls(name, rng=random.Random(parsed.seed))

    def reseed(self, salt: int) -> None:
        salt_rng(self._rng, salt)

    def pick(
        self,
        ctx: RequestContext,
        view: RoutingView,
        candidates: Sequence[Candidate],
        scores: Sequence[float],
        *,
        limit: int | None = None,
    ) -> list[Candidate]:
        # One stable sort, best first, gives both the primary's ties (a prefix of it, taken back
        # to input order for the draw) and the fallbacks (equal scores keep input order).
        order = sorted(range(len(scores)), key=scores.__getitem__, reverse=True)
        threshold = scores[order[0]] - TIE_TOLERANCE
        ties = 1
        while ties < len(order) and scores[order[ties]] >= threshold:
            ties += 1
        first = order[0] if ties == 1 else self._rng.choice(sorted(order[:ties]))
        wanted = len(candidates) if limit is None else min(limit, len(candidates))
        if wanted <= 1:
            return [candidates[first]]
        order.remove(first)
        return [candidates[first], *[candidates[i] for i in order[: wanted - 1]]]
