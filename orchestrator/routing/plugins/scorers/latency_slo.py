"""Scorer `latency-slo`: prefer replicas predicted to meet the TTFT and TPOT targets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from orchestrator.routing.context import RequestContext
from orchestrator.routing.plugin import Candidate, PluginParams, RoutingView
from orchestrator.routing.plugins.params import parse_params
from orchestrator.routing.plugins.scorers.params import LatencySloParams
from orchestrator.routing.plugins.scorers.utilised import RatesByUtilisation
from orchestrator.routing.signals import (
    DEFAULT_DEGRADED_CAPACITY_FACTOR,
    MAX_PREDICTED_UTILISATION,
    UNKNOWN_TPOT_FRACTION,
    UNKNOWN_TTFT_FRACTION,
)


class LatencySloScorer(RatesByUtilisation):
    """score = min(1, T_ttft / TTFT_pred) × min(1, T_tpot / TPOT_pred).

    With ρ the replica's utilisation (as in `capacity-headroom`), in seconds:
        TTFT_pred = ttft_base / (1 − min(ρ, 0.95)), ttft_base = measured TTFT or T_ttft / 4;
        TPOT_pred = tpot_base × (1 + ρ),            tpot_base = measured TPOT or T_tpot / 2.
    Targets T come from the view. A replica predicted within both targets scores 1; one predicted
    at twice a target scores 1/2. An unmeasured replica scores 1 up to ρ = 0.75.

    Type: latency-slo. Range (0, 1].
    Parameters: degradedCapacityFactor (in (0, 1], default 0.5), as in `capacity-headroom`.
    """

    TYPE: ClassVar[str] = "latency-slo"

    def __init__(
        self,
        name: str | None = None,
        *,
        degraded_capacity_factor: float = DEFAULT_DEGRADED_CAPACITY_FACTOR,
    ) -> None:
        self.name = name or self.TYPE
        self.degraded_capacity_factor = degraded_capacity_factor

    @classmethod
    def from_params(cls, name: str, params: PluginParams) -> LatencySloScorer:
        parsed = parse_params(LatencySloParams, cls.TYPE, name, params)
        return cls(name, degraded_capacity_factor=parsed.degraded_capacity_factor)

    def score_utilised(
        self,
        ctx: RequestContext,
        view: RoutingView,
        candidates: Sequence[Candidate],
        rhos: Sequence[float],
    ) -> list[float]:
        # `predicted_ttft_s`, `predicted_tpot_s` and min(1, T / pred) written out: this runs for
        # every candidate scored.
        target_ttft, target_tpot = view.target_ttft_s, view.target_tpot_s
        unknown_ttft = target_ttft * UNKNOWN_TTFT_FRACTION
        unknown_tpot = target_tpot * UNKNOWN_TPOT_FRACTION
        scores = []
        for candidate, rho in zip(candidates, rhos, strict=True):
            stats = candidate.stats
            ttft_base = stats.ttft_s
            if ttft_base is None:
                ttft_base = unknown_ttft
            tpot_base = stats.tpot_s
            if tpot_base is None:
                tpot_base = unknown_tpot
            capped = MAX_PREDICTED_UTILISATION if rho > MAX_PREDICTED_UTILISATION else rho
            ttft = ttft_base / (1.0 - capped)
            tpot = tpot_base * (1.0 + rho)
            scores.append(
                (1.0 if ttft <= target_ttft else target_ttft / ttft)
                * (1.0 if tpot <= target_tpot else target_tpot / tpot)
            )
        return scores
