"""Filter `not-draining`: drop replicas that finish what they have and take nothing new."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from orchestrator.core.records import ReplicaState
from orchestrator.routing.context import RequestContext
from orchestrator.routing.plugin import Candidate, PluginParams, RoutingView
from orchestrator.routing.plugins.params import PluginParamsModel, parse_params


class _Params(PluginParamsModel):
    pass


class NotDrainingFilter:
    """Keeps a replica iff `replica.state != DRAINING`.

    Type: not-draining. Request-independent. Parameters: none.
    """

    TYPE: ClassVar[str] = "not-draining"
    REQUEST_INDEPENDENT: ClassVar[bool] = True

    def __init__(self, name: str | None = None) -> None:
        self.name = name or self.TYPE

    @classmethod
    def from_params(cls, name: str, params: PluginParams) -> NotDrainingFilter:
        parse_params(_Params, cls.TYPE, name, params)
        return cls(name)

    def filter(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> list[Candidate]:
        return [c for c in candidates if c.replica.state is not ReplicaState.DRAINING]
