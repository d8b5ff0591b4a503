"""The local Prometheus of `orchestrator up --prometheus`: the shipped rules (latency targets
scaled like the router's) over every process the stack started; the engines found through the
control plane's HTTP service discovery, so replicas placed later are scraped too."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from orchestrator.core.records import Replica
from orchestrator.monitoring.local_prometheus import LocalPrometheus
from orchestrator.monitoring.rules import render_rules
from orchestrator.monitoring.scrape_config import DiscoveredJob
from orchestrator.monitoring.targets import ENGINE_JOB, ExporterEndpoint, stack_targets

DEFAULT_PROMETHEUS_PORT: Final = 9090
# The fabric simulator advances its counters once a second; scraping faster shows nothing new.
SCRAPE_INTERVAL_S: Final = 1.0
# How often the engine list is re-read: a scaled-up replica is scraped within about this long.
SD_REFRESH_S: Final = 2.0


@dataclass(frozen=True, slots=True)
class PrometheusRequest:
    """What `up --prometheus` asked for: the port (0 picks a free one) and, for demos and tests,
    a cap on every alert's `for:` in seconds (None keeps the shipped durations)."""

    port: int = DEFAULT_PROMETHEUS_PORT
    max_for_s: float | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"prometheus port must be 0-65535, got {self.port}")
        if self.max_for_s is not None and self.max_for_s < 0:
            raise ValueError(f"the alert for: cap must be >= 0 seconds, got {self.max_for_s}")


def stack_prometheus(
    request: PrometheusRequest,
    *,
    host: str,
    routers: Sequence[str],
    exporters: Sequence[ExporterEndpoint],
    latency_scale: float,
    engines_sd_url: str | None = None,
    replicas: Sequence[Replica] = (),
) -> LocalPrometheus:
    """Prometheus on `host:request.port` scraping the stack, not yet started (start it from the
    thread that outlives it: the process is tied to that thread's life). Engines come from
    `engines_sd_url` (the control plane's HTTP SD) when given, else from `replicas` as static
    targets. Raises `PrometheusUnavailable` without the binary."""
    discovered = (
        [DiscoveredJob(ENGINE_JOB, engines_sd_url, refresh_s=SD_REFRESH_S)]
        if engines_sd_url
        else []
    )
    static_replicas = () if engines_sd_url else replicas
    return LocalPrometheus(
        stack_targets(routers=routers, replicas=static_replicas, exporters=exporters),
        discovered=discovered,
        rules=render_rules(max_for_s=request.max_for_s, latency_scale=latency_scale),
        host=host,
        port=request.port,
        scrape_interval_s=SCRAPE_INTERVAL_S,
        evaluation_interval_s=SCRAPE_INTERVAL_S,
    )
