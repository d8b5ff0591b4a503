"""Plugin types by name: the one map from a `TYPE` string in YAML to the factory that builds it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.routing.plugin import Filter, Picker, Scorer

Plugin = Filter | Scorer | Picker
PluginFactory = Callable[[str, Mapping[str, Any]], Plugin]


class PluginRegistry:
    """Factories keyed by plugin type; unknown types are an error that lists the known ones."""

    def __init__(self) -> None:
        self._factories: dict[str, PluginFactory] = {}

    def register(self, plugin_type: str, factory: PluginFactory) -> None:
        if plugin_type in self._factories:
            raise ValueError(f"plugin type {plugin_type!r} registered twice")
        self._factories[plugin_type] = factory

    def build(self, plugin_type: str, name: str, params: Mapping[str, Any]) -> Plugin:
        factory = self._factories.get(plugin_type)
        if factory is None:
            known = ", ".join(sorted(self._factories))
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT,
                f"unknown plugin type {plugin_type!r}; known types: {known}",
                param="type",
            )
        return factory(name, params)

    @property
    def types(self) -> frozenset[str]:
        return frozenset(self._factories)
