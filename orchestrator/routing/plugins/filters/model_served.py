"""Filter `model-served`: keep replicas that serve the requested model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from orchestrator.routing.context import RequestContext
from orchestrator.routing.plugin import Candidate, PluginParams, RoutingView
from orchestrator.routing.plugins.params import PluginParamsModel, parse_params


class _Params(PluginParamsModel):
    pass


class ModelServedFilter:
    """Keeps a replica iff `replica.model == ctx.model` (exact string match).

    Type: model-served. Request-independent: depends on the request only through its model.
    Parameters: none. When it leaves nothing, the profile reports the model as not found.
    """

    TYPE: ClassVar[str] = "model-served"
    REQUEST_INDEPENDENT: ClassVar[bool] = True

    def __init__(self, name: str | None = None) -> None:
        self.name = name or self.TYPE

    @classmethod
    def from_params(cls, name: str, params: PluginParams) -> ModelServedFilter:
        parse_params(_Params, cls.TYPE, name, params)
        return cls(name)

    def filter(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> list[Candidate]:
        model = ctx.model
        return [c for c in candidates if c.replica.model == model]
