"""Filter `load-known`: drop replicas whose load is stale or unreadable, so unknown never passes
for idle."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from orchestrator.routing.context import RequestContext
from orchestrator.routing.plugin import Candidate, PluginParams, RoutingView
from orchestrator.routing.plugins.params import PluginParamsModel, parse_params


class _Params(PluginParamsModel):
    pass


class LoadKnownFilter:
    """Keeps a replica iff `stats.load_known(view.now_s)`: its last load report is younger than the
    router's staleness bound and was readable (no adapter error).

    A replica with no report yet is kept (no data is not bad data: a new replica takes work at
    once). A stale one would otherwise be scored on a load that may be long gone, and an
    unreadable page reads as no load at all: both would look idler than they are.
    Type: load-known. Request-independent. Parameters: none. Usually soft, so a control plane
    that stopped reporting altogether narrows nothing: routers go on from their own in-flight.
    """

    TYPE: ClassVar[str] = "load-known"
    REQUEST_INDEPENDENT: ClassVar[bool] = True

    def __init__(self, name: str | None = None) -> None:
        self.name = name or self.TYPE

    @classmethod
    def from_params(cls, name: str, params: PluginParams) -> LoadKnownFilter:
        parse_params(_Params, cls.TYPE, name, params)
        return cls(name)

    def filter(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> list[Candidate]:
        now_s = view.now_s
        return [c for c in candidates if now_s <= c.stats.load_known_until_s]
