"""Engine adapters, one per engine kind: launch command, health path, metric names → load.

Layer 3: may import `core/`, `config/`, `fleet/` and `security/`; independent of its siblings
`sim/`, `table/` and `exporters/`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from orchestrator.core.records import EngineKind
from orchestrator.engines.base import EngineAdapter, LaunchCommand, LaunchSpec, MetricNames, Series
from orchestrator.engines.errors import (
    MalformedMetricsPageError,
    MissingMetricsError,
    NotLaunchableError,
    UnknownEngineKindError,
)
from orchestrator.engines.external import ExternalAdapter
from orchestrator.engines.metrics import parse_replica_load
from orchestrator.engines.sglang import SglangAdapter
from orchestrator.engines.sim import SimAdapter
from orchestrator.engines.vllm import VllmAdapter

__all__ = [
    "EngineAdapter",
    "ExternalAdapter",
    "LaunchCommand",
    "LaunchSpec",
    "MalformedMetricsPageError",
    "MetricNames",
    "MissingMetricsError",
    "NotLaunchableError",
    "Series",
    "SglangAdapter",
    "SimAdapter",
    "UnknownEngineKindError",
    "VllmAdapter",
    "adapter_for",
    "parse_replica_load",
]

# Adapters hold no state, so one shared instance per kind is enough.
_ADAPTERS: Final[Mapping[EngineKind, EngineAdapter]] = MappingProxyType(
    {
        EngineKind.VLLM: VllmAdapter(),
        EngineKind.SGLANG: SglangAdapter(),
        EngineKind.SIM: SimAdapter(),
        EngineKind.EXTERNAL: ExternalAdapter(),
    }
)


def adapter_for(kind: EngineKind | str) -> EngineAdapter:
    """The adapter for `kind`, given as an enum or its value in any case ("vllm", "vLLM").

    External replicas get the vLLM metric table; build `ExternalAdapter(sglang.METRIC_NAMES)` for
    external SGLang servers. Raises `UnknownEngineKindError` (a ValueError) quoting `kind`.
    """
    try:
        return _ADAPTERS[EngineKind(kind.strip().lower())]
    except ValueError:
        raise UnknownEngineKindError(kind, [k.value for k in EngineKind]) from None
