"""What to scrape in a running stack, and the labels each target's series get.

Engines export vLLM's names with only `model_name` and `engine`; the target labels (the same the
control plane's HTTP service discovery gives, `controlplane/sd_targets.py`) say which site,
generation, pool, replica and node a series is from, so rules and dashboards can group by them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.controlplane.sd_targets import address_of, engine_labels
from orchestrator.core.records import Replica
from orchestrator.monitoring.scrape_config import ScrapeTarget

ROUTER_JOB = "router"
ENGINE_JOB = "engine"
EXPORTER_JOB = "exporter"


@dataclass(frozen=True, slots=True)
class ExporterEndpoint:
    """A node exporter of the stack: `address` is host:port; the exporter labels its own series
    with `node` and `site`, the target adds the node's GPU `generation`."""

    node: str
    site: str
    generation: str
    address: str


def stack_targets(
    *,
    routers: Sequence[str],
    replicas: Sequence[Replica],
    exporters: Sequence[ExporterEndpoint],
) -> list[ScrapeTarget]:
    """Every process of a stack to scrape: routers (host:port), engines, node exporters."""
    targets = [ScrapeTarget(ROUTER_JOB, address) for address in routers]
    for replica in replicas:
        targets.append(ScrapeTarget(ENGINE_JOB, address_of(replica.url), engine_labels(replica)))
    for exporter in exporters:
        labels = {"node": exporter.node, "site": exporter.site, "generation": exporter.generation}
        targets.append(ScrapeTarget(EXPORTER_JOB, exporter.address, labels))
    return targets


__all__ = [
    "ENGINE_JOB",
    "EXPORTER_JOB",
    "ROUTER_JOB",
    "ExporterEndpoint",
    "address_of",  # where it always was, for callers that build targets themselves
    "stack_targets",
]
