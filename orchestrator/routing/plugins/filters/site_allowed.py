"""Filter `site-allowed`: keep replicas in the sites a profile may use (data residency, tests)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from pydantic import Field

from orchestrator.routing.context import RequestContext
from orchestrator.routing.plugin import Candidate, PluginParams, RoutingView
from orchestrator.routing.plugins.params import PluginParamsModel, parse_params


class _Params(PluginParamsModel):
    sites: list[str] = Field(default_factory=list)


class SiteAllowedFilter:
    """Keeps a replica iff its site is in `sites`; an empty `sites` keeps every replica.

    Type: site-allowed. Request-independent.
    Parameters: sites (list of site names, default [] = all sites).
    """

    TYPE: ClassVar[str] = "site-allowed"
    REQUEST_INDEPENDENT: ClassVar[bool] = True

    def __init__(self, name: str | None = None, *, sites: Iterable[str] = ()) -> None:
        self.name = name or self.TYPE
        self.sites = frozenset(sites)

    @classmethod
    def from_params(cls, name: str, params: PluginParams) -> SiteAllowedFilter:
        parsed = parse_params(_Params, cls.TYPE, name, params)
        return cls(name, sites=parsed.sites)

    def filter(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> list[Candidate]:
        if not self.sites:
            return list(candidates)
        return [c for c in candidates if c.replica.site in self.sites]
