"""The exporter as a Prometheus collector: runs the node collectors at scrape time and turns
their readings into metric families labelled with the node and site.

Malformed files are logged once per path and counted in `orchestrator_exporter_errors_total`
by collector; a collector that fails outright is counted too, and the others still export.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from orchestrator.exporters import names as n
from orchestrator.exporters.names import METRICS, MetricType
from orchestrator.exporters.samples import Reading, Sample

LOG = logging.getLogger(__name__)


class NodeCollector(Protocol):
    """Reads one subsystem of a node; `name` is its `collector` label."""

    name: str

    def read(self) -> Reading:
        """Everything the subsystem shows now; never raises for a missing or malformed file."""


@dataclass(frozen=True, slots=True)
class Scrape:
    """One pass over all collectors: their samples, and seconds spent in each."""

    samples: list[Sample]
    durations_s: dict[str, float]
    errors_total: dict[str, int]


class NodeExporter(Collector):
    """All of one node's collectors behind one `collect()`, so that each family appears once."""

    def __init__(
        self,
        collectors: Sequence[NodeCollector],
        *,
        node: str,
        site: str,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        """`timer` (seconds, monotonic) measures each collector's share of a scrape."""
        self.collectors = tuple(collectors)
        self.node = node
        self.site = site
        self._timer = timer
        self._errors = {collector.name: 0 for collector in self.collectors}
        self._logged: set[str] = set()
        self._lock = threading.Lock()

    def scrape(self) -> Scrape:
        """Read every collector now. Thread-safe: concurrent scrapes run one after the other."""
        with self._lock:
            samples: list[Sample] = []
            durations: dict[str, float] = {}
            for collector in self.collectors:
                started = self._timer()
                samples.extend(self._read(collector))
                durations[collector.name] = self._timer() - started
            return Scrape(samples, durations, dict(self._errors))

    def collect(self) -> Iterator[Metric]:
        scrape = self.scrape()
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        common = (self.node, self.site)
        for sample in scrape.samples:
            family = families.get(sample.metric)
            if family is None:
                family = families[sample.metric] = _family(sample.metric)
            family.add_metric((*common, *sample.labels), sample.value)
        errors = _family(n.EXPORTER_ERRORS)
        durations = _family(n.EXPORTER_SCRAPE_DURATION)
        for name, count in scrape.errors_total.items():
            errors.add_metric((*common, name), count)
            durations.add_metric((*common, name), scrape.durations_s[name])
        yield from (families[name] for name in METRICS if name in families)
        yield errors
        yield durations

    def _read(self, collector: NodeCollector) -> list[Sample]:
        try:
            reading = collector.read()
        except Exception:  # a bug in one collector must not take the others' metrics down
            LOG.exception("collector %s failed; its metrics miss this scrape", collector.name)
            self._errors[collector.name] += 1
            return []
        for error in reading.malformed:
            self._errors[collector.name] += 1
            if error.path not in self._logged:
                self._logged.add(error.path)
                LOG.warning("skipping malformed file (logged once): %s", error)
        return reading.samples


def _family(name: str) -> CounterMetricFamily | GaugeMetricFamily:
    spec = METRICS[name]
    if spec.type is MetricType.COUNTER:
        return CounterMetricFamily(name, spec.help, labels=spec.label_names)
    return GaugeMetricFamily(name, spec.help, labels=spec.label_names)
