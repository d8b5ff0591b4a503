"""What a collector produces in one read: samples in base units, and the files it could not parse.

Collectors write here instead of into Prometheus objects so that the same read serves the
`/metrics` exposition and in-process consumers (fabric health, the benchmark) alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.exporters.names import METRICS
from orchestrator.exporters.sysfs import MalformedFile


@dataclass(frozen=True, slots=True)
class Sample:
    """One series' value. `labels` are the family's own labels (`MetricSpec.labels`, without
    node and site), in that order. `width_bits` is the raw hardware counter's width (64 unless a
    narrower counter can wrap between reads); gauges leave it at 64."""

    metric: str
    labels: tuple[str, ...]
    value: float
    width_bits: int = 64

    def label_map(self) -> dict[str, str]:
        """The labels by name."""
        return dict(zip(METRICS[self.metric].labels, self.labels, strict=True))


@dataclass(slots=True)
class Reading:
    """A collector's output for one scrape: samples, and one `MalformedFile` per file skipped."""

    samples: list[Sample] = field(default_factory=list)
    malformed: list[MalformedFile] = field(default_factory=list)

    def add(self, metric: str, labels: tuple[str, ...], value: float, width_bits: int = 64) -> None:
        self.samples.append(Sample(metric, labels, value, width_bits))
