"""Scorer `site-locality`: keep requests in the client's site unless another site is predicted
faster by more than the round trip, with hysteresis so traffic does not flap between sites."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import ClassVar

from orchestrator.routing.context import RequestContext
from orchestrator.routing.memo import IdentityMemo
from orchestrator.routing.plugin import Candidate, PluginParams, RoutingView, salt_rng
from orchestrator.routing.plugins.params import parse_params
from orchestrator.routing.plugins.scorers.params import (
    DEFAULT_MARGIN_S,
    DEFAULT_REMOTE_SCORE,
    SiteLocalityParams,
)
from orchestrator.routing.plugins.scorers.params import (
    DEFAULT_SITE_NOMINEES as DEFAULT_NOMINEES,
)
from orchestrator.routing.plugins.scorers.utilised import RatesByUtilisation
from orchestrator.routing.sampling import sample
from orchestrator.routing.signals import (
    DEFAULT_DEGRADED_CAPACITY_FACTOR,
    predicted_ttft_s,
)


def _by_site(eligible: Sequence[Candidate]) -> dict[str, list[Candidate]]:
    sites: dict[str, list[Candidate]] = {}
    for candidate in eligible:
        sites.setdefault(candidate.replica.site, []).append(candidate)
    return sites


class SiteLocalityScorer(RatesByUtilisation):
    """Local replicas score 1; a remote replica scores 1 while its site is in "spill" for the
    client's site, else `remoteScore`. With no `ctx.client_site`, every candidate scores 1.

    Spill, per (client site c, remote site r), from the candidates scored:
        advantage = min TTFT_pred(local) − min TTFT_pred(replicas in r) − RTT(c, r)   [s]
        enter spill when advantage > marginS; leave it when advantage < −marginS.
    That is: go remote when the remote site is predicted faster by more than the round trip plus
    the margin, and come back only once it is no longer faster by the round trip minus the
    margin. TTFT_pred = base / (1 − min(ρ, 0.95)) (see `latency-slo`); RTT from the table's sites.
    With no local candidate, the advantage is infinite: every remote site spills. A remote site
    with no candidate scored keeps its state. The state lives in this instance.

    When a profile samples, `nominate` adds `nominees` random local replicas, so a small local
    site is always compared (sites indexed once per eligible tuple).

    Type: site-locality. Range {remoteScore, 1}.
    Parameters: remoteScore (in [0, 1], default 0); marginS (s, ≥ 0, default 0.05);
    degradedCapacityFactor (in (0, 1], default 0.5); nominees (1..64, default 2); seed (int,
    default 0) for the nominees' draw.
    """

    TYPE: ClassVar[str] = "site-locality"

    def __init__(
        self,
        name: str | None = None,
        *,
        remote_score: float = DEFAULT_REMOTE_SCORE,
        margin_s: float = DEFAULT_MARGIN_S,
        degraded_capacity_factor: float = DEFAULT_DEGRADED_CAPACITY_FACTOR,
        nominees: int = DEFAULT_NOMINEES,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name or self.TYPE
        self.remote_score = remote_score
        self.margin_s = margin_s
        self.degraded_capacity_factor = degraded_capacity_factor
        self.nominees = nominees
        self._rng = rng or random.Random(0)
        self._spilling: set[tuple[str, str]] = set()
        self._sites: IdentityMemo[Sequence[Candidate], dict[str, list[Candidate]]] = IdentityMemo()

    @classmethod
    def from_params(cls, name: str, params: PluginParams) -> SiteLocalityScorer:
        parsed = parse_params(SiteLocalityParams, cls.TYPE, name, params)
        return cls(
            name,
            remote_score=parsed.remote_score,
            margin_s=parsed.margin_s,
            degraded_capacity_factor=parsed.degraded_capacity_factor,
            nominees=parsed.nominees,
            rng=random.Random(parsed.seed),
        )

    def reseed(self, salt: int) -> None:
        salt_rng(self._rng, salt)

    def spilling(self, client_site: str, remote_site: str) -> bool:
        """Whether requests from `client_site` may go to `remote_site` as if it were local."""
        return (client_site, remote_site) in self._spilling

    def score_utilised(
        self,
        ctx: RequestContext,
        view: RoutingView,
        candidates: Sequence[Candidate],
        rhos: Sequence[float],
    ) -> list[float]:
        client = ctx.client_site
        if client is None:
            return [1.0] * len(candidates)
        best_local = math.inf
        best_remote: dict[str, float] = {}
        for candidate, rho in zip(candidates, rhos, strict=True):
            ttft = predicted_ttft_s(candidate, view, rho)
            site = candidate.replica.site
            if site == client:
                best_local = min(best_local, ttft)
            elif ttft < best_remote.get(site, math.inf):
                best_remote[site] = ttft
        for site, ttft in best_remote.items():
            advantage = best_local - ttft - view.table.rtt_s(client, site)
            if advantage > self.margin_s:
                self._spilling.add((client, site))
            elif advantage < -self.margin_s:
                self._spilling.discard((client, site))
        return [
            1.0
            if c.replica.site == client or (client, c.replica.site) in self._spilling
            else self.remote_score
            for c in candidates
        ]

    def nominate(
        self, ctx: RequestContext, view: RoutingView, eligible: Sequence[Candidate]
    ) -> list[Candidate]:
        if ctx.client_site is None:
            return []
        local = self._sites.get(eligible, _by_site).get(ctx.client_site, [])
        if len(local) <= self.nominees:
            return list(local)
        return sample(self._rng, local, self.nominees)  # `self._rng.sample`'s draws, cheaper
