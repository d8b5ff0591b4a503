"""Picker `power-of-two`: of two random candidates, the one holding fewer requests (baseline)."""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from typing import ClassVar

from orchestrator.routing.context import RequestContext
from orchestrator.routing.plugin import Candidate, PluginParams, RoutingView, salt_rng
from orchestrator.routing.plugins.params import PluginParamsModel, parse_params
from orchestrator.routing.signals import outstanding


class _Params(PluginParamsModel):
    seed: int = 0


class PowerOfTwoPicker:
    """Primary: of two candidates drawn uniformly without replacement, the one with fewer
    `in_flight + others_in_flight` (the first drawn on a tie). Fallbacks: the other, then the
    rest by fewer outstanding requests. Scores are ignored; capacity is not looked at.

    Mitzenmacher's power of two choices. Under a sampling profile it draws from the sample, which
    is itself uniform, so the primary's distribution is the same.
    Type: power-of-two. Parameters: seed (int, default 0).
    """

    TYPE: ClassVar[str] = "power-of-two"

    def __init__(self, name: str | None = None, *, rng: random.Random | None = None) -> None:
        self.name = name or self.TYPE
        self._rng = rng or random.Random(0)

    @classmethod
    def from_params(cls, name: str, params: PluginParams) -> PowerOfTwoPicker:
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
        if len(candidates) == 1:
            return [candidates[0]]
        i, j = self._rng.sample(range(len(candidates)), 2)
        first, second = candidates[i], candidates[j]
        if outstanding(second) < outstanding(first):
            first, second = second, first
        wanted = len(candidates) if limit is None else min(limit, len(candidates))
        if wanted <= 2:
            return [first, second][:wanted]
        rest = (c for k, c in enumerate(candidates) if k not in (i, j))
        return [first, second, *heapq.nsmallest(wanted - 2, rest, key=outstanding)]
