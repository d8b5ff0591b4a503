"""Picker `weighted-random`: a random replica, with probability proportional to a static weight
(the hand-tuned baseline, as in MangoBoost's scheduler)."""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from itertools import accumulate
from typing import Annotated, ClassVar

from pydantic import Field

from orchestrator.routing.context import RequestContext
from orchestrator.routing.memo import IdentityMemo
from orchestrator.routing.plugin import Candidate, PluginParams, RoutingView, salt_rng
from orchestrator.routing.plugins.params import PluginParamsModel, parse_params


class _Params(PluginParamsModel):
    weights: dict[str, Annotated[float, Field(gt=0.0)]] = Field(default_factory=dict)
    seed: int = 0


class _Weights:
    """Cumulative weights for drawing, and the candidates by weight (heaviest first)."""

    __slots__ = ("by_weight", "cumulative")

    def __init__(self, candidates: Sequence[Candidate], weight_of: Mapping[str, float]) -> None:
        weights = [weight_of.get(c.replica.pool, c.replica.static_weight) for c in candidates]
        self.cumulative = list(accumulate(weights))
        self.by_weight = sorted(range(len(candidates)), key=lambda i: -weights[i])


class WeightedRandomPicker:
    """P(primary = r) = w(r) / Σ w, w(r) = `weights[r.pool]` if given, else `r.static_weight`.
    Fallbacks: the other candidates by weight, heaviest first. Scores are ignored.

    O(log n) per pick (cumulative weights built once per eligible tuple).
    Type: weighted-random. Parameters: weights ({pool: weight > 0}, default {}); seed (int,
    default 0).
    """

    TYPE: ClassVar[str] = "weighted-random"
    WHOLE_SET: ClassVar[bool] = True

    def __init__(
        self,
        name: str | None = None,
        *,
        weights: Mapping[str, float] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name or self.TYPE
        self.weights = dict(weights or {})
        self._rng = rng or random.Random(0)
        self._tables: IdentityMemo[Sequence[Candidate], _Weights] = IdentityMemo()

    @classmethod
    def from_params(cls, name: str, params: PluginParams) -> WeightedRandomPicker:
        parsed = parse_params(_Params, cls.TYPE, name, params)
        return cls(name, weights=parsed.weights, rng=random.Random(parsed.seed))

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
        table = self._tables.get(candidates, self._weight_table)
        draw = self._rng.random() * table.cumulative[-1]
        first = min(bisect_right(table.cumulative, draw), len(candidates) - 1)
        wanted = len(candidates) if limit is None else min(limit, len(candidates))
        chosen = [first]
        for index in table.by_weight:
            if len(chosen) >= wanted:
                break
            if index != first:
                chosen.append(index)
        return [candidates[i] for i in chosen]

    def _weight_table(self, candidates: Sequence[Candidate]) -> _Weights:
        return _Weights(candidates, self.weights)
