"""Filter `fabric-healthy`: drop replicas on nodes whose RoCE fabric or HBM is unhealthy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from orchestrator.core.records import NodeHealth
from orchestrator.routing.context import RequestContext
from orchestrator.routing.plugin import Candidate, PluginParams, RoutingView
from orchestrator.routing.plugins.params import PluginParamsModel, parse_params


class _Params(PluginParamsModel):
    pass


class FabricHealthyFilter:
    """Keeps a replica iff `replica.node_health != UNHEALTHY`.

    A DEGRADED node stays: `capacity-headroom` counts it at a fraction of its capacity instead.
    Type: fabric-healthy. Request-independent. Parameters: none. Usually soft, so a fabric alarm
    that covers every node narrows nothing.
    """

    TYPE: ClassVar[str] = "fabric-healthy"
    REQUEST_INDEPENDENT: ClassVar[bool] = True

    def __init__(self, name: str | None = None) -> None:
        self.name = name or self.TYPE

    @classmethod
    def from_params(cls, name: str, params: PluginParams) -> FabricHealthyFilter:
        parse_params(_Params, cls.TYPE, name, params)
        return cls(name)

    def filter(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> list[Candidate]:
        return [c for c in candidates if c.replica.node_health is not NodeHealth.UNHEALTHY]
