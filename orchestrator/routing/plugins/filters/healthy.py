"""Filter `healthy`: drop replicas whose engine failed its health check or whose circuit is open."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from orchestrator.core.records import ReplicaState
from orchestrator.routing.context import RequestContext
from orchestrator.routing.plugin import Candidate, PluginParams, RoutingView
from orchestrator.routing.plugins.params import PluginParamsModel, parse_params


class _Params(PluginParamsModel):
    pass


class HealthyFilter:
    """Keeps a replica iff `replica.state != UNHEALTHY` and `not stats.circuit_open`.

    Type: healthy. Request-independent: a cached result may miss a circuit that opened within
    the profile's time bucket (0.2 s); the forwarder's fallbacks cover that window.
    Parameters: none.
    """

    TYPE: ClassVar[str] = "healthy"
    REQUEST_INDEPENDENT: ClassVar[bool] = True

    def __init__(self, name: str | None = None) -> None:
        self.name = name or self.TYPE

    @classmethod
    def from_params(cls, name: str, params: PluginParams) -> HealthyFilter:
        parse_params(_Params, cls.TYPE, name, params)
        return cls(name)

    def filter(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> list[Candidate]:
        return [
            c
            for c in candidates
            if c.replica.state is not ReplicaState.UNHEALTHY and not c.stats.circuit_open
        ]
