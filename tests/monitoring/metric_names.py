"""Metric names: those our processes export, and those a PromQL expression reads."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from orchestrator.exporters import names as exporter_names
from orchestrator.forwarding.metrics import RouterMetrics
from orchestrator.sim.metrics import EngineGauges, SimEngineMetrics

# A metric name in PromQL: a word with an underscore or a colon, not a function call.
_METRIC = re.compile(r"(?<![\w:\"'])([a-zA-Z_]\w*[_:][\w:]*)(?![\w(])")
_KEYWORDS = {"group_left", "group_right"}
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported_names() -> set[str]:
    """Every metric name our processes expose: exporter table, router, simulated engine."""
    found = set(exporter_names.METRICS) | {"up"}
    registry = CollectorRegistry()
    RouterMetrics(registry)
    registry.register(
        SimEngineMetrics("m", lambda: EngineGauges(running=0, waiting=0, kv_cache_usage=0.0))
    )
    for family in registry.collect():
        found.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",)))
    return found


def metric_names_in(expr: str) -> set[str]:
    """The metric names `expr` reads (label matchers, strings and grouping clauses removed)."""
    bare = re.sub(r'"[^"]*"', '""', expr)
    bare = re.sub(r"\{[^}]*\}", "", bare)
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", bare)
    return set(_METRIC.findall(bare)) - _KEYWORDS
