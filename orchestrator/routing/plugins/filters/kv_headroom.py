"""Filter `kv-headroom`: drop replicas that are out of KV cache and already queueing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, ClassVar

from pydantic import Field

from orchestrator.routing.context import RequestContext
from orchestrator.routing.plugin import Candidate, PluginParams, RoutingView
from orchestrator.routing.plugins.params import PluginParamsModel, parse_params

DEFAULT_MAX_KV_USAGE = 0.98


class _Params(PluginParamsModel):
    max_kv_usage: Annotated[float, Field(gt=0.0, le=1.0, alias="maxKvUsage")] = DEFAULT_MAX_KV_USAGE


class KvHeadroomFilter:
    """Drops a replica whose last scraped load has `kv_cache_usage >= maxKvUsage` and
    `waiting > 0`: its cache is full and requests already wait for memory, so a new one would too.

    A replica with no scrape yet is kept: no data is not bad data.
    Type: kv-headroom. Request-independent: it reads only the last scrape, which changes far less
    often than the profile's 0.2 s time bucket.
    Parameters: maxKvUsage (ratio in (0, 1], default 0.98). Usually soft.
    """

    TYPE: ClassVar[str] = "kv-headroom"
    REQUEST_INDEPENDENT: ClassVar[bool] = True

    def __init__(self, name: str | None = None, *, max_kv_usage: float = DEFAULT_MAX_KV_USAGE):
        self.name = name or self.TYPE
        self.max_kv_usage = max_kv_usage

    @classmethod
    def from_params(cls, name: str, params: PluginParams) -> KvHeadroomFilter:
        parsed = parse_params(_Params, cls.TYPE, name, params)
        return cls(name, max_kv_usage=parsed.max_kv_usage)

    def filter(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> list[Candidate]:
        return [c for c in candidates if not self._full(c)]

    def _full(self, candidate: Candidate) -> bool:
        load = candidate.stats.load
        return load is not None and load.kv_cache_usage >= self.max_kv_usage and load.waiting > 0
