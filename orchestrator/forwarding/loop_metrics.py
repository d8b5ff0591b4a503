"""Counter and histogram families moved once or more per request, from the router's event loop.

prometheus_client takes a lock and runs several interpreted calls for each `inc` or `observe`
(about a microsecond each; six a request were 4% of a plain completion's CPU). These families
keep plain numbers that compiled code moves directly and turn them into prometheus_client's
metric families only when the registry is collected (a scrape), so the exposition, names and
labels stay the library's. They are not thread-safe beyond what the GIL gives one `+=`: every
writer runs on the one event loop of its router process. Unlike prometheus_client's own, they
export no `_created` series.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from typing import Final, cast

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

# Typed here: the library leaves it unannotated, and a fresh build's type check (its isolated
# environment has no prometheus_client) sees it as `Any`; a cast reads the same in both, where a
# `type: ignore` would be unused there and fail the build, which then falls back to the sources.
_go_float: Final = cast("Callable[[float], str]", floatToGoString)


class CounterCell:
    """One labelled counter: a number that only goes up."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        self.value += amount


class HistogramCell:
    """One labelled histogram: a count per bucket (a value equal to a bound falls in that
    bucket, as Prometheus' `le` says) and the sum of the values."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf's
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.total += value
        if value != value:  # NaN: in no bucket, as prometheus_client counts it
            return
        self.counts[bisect.bisect_left(self.bounds, value)] += 1


def _label_values(names: tuple[str, ...], values: tuple[str, ...]) -> tuple[str, ...]:
    if len(values) != len(names):
        raise ValueError(f"expected {len(names)} label values ({', '.join(names)}), got {values}")
    return values


class CounterFamily:
    """A counter family with a cell per label combination; a collector for `registry`."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        registry: CollectorRegistry,
    ) -> None:
        self.name = name.removesuffix("_total")
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._cells: dict[tuple[str, ...], CounterCell] = {}
        if not self.labelnames:
            self._cells[()] = CounterCell()
        registry.register(self)

    def labels(self, *values: str) -> CounterCell:
        key = _label_values(self.labelnames, values)
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = CounterCell()
        return cell

    def inc(self, amount: float = 1.0) -> None:
        """For a family without labels."""
        self.labels().inc(amount)

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for key, cell in list(self._cells.items()):
            family.add_metric(list(key), cell.value)
        yield family


class HistogramFamily:
    """A histogram family with a cell per label combination; a collector for `registry`."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        bounds = tuple(float(bound) for bound in buckets if bound != float("inf"))
        if not bounds or list(bounds) != sorted(set(bounds)):
            raise ValueError(f"{name}: bucket bounds must be distinct and increasing: {buckets}")
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = bounds
        self._les = [*(_go_float(bound) for bound in bounds), "+Inf"]
        self._cells: dict[tuple[str, ...], HistogramCell] = {}
        if not self.labelnames:
            self._cells[()] = HistogramCell(bounds)
        registry.register(self)

    def labels(self, *values: str) -> HistogramCell:
        key = _label_values(self.labelnames, values)
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = HistogramCell(self.bounds)
        return cell

    def observe(self, value: float) -> None:
        """For a family without labels."""
        self.labels().observe(value)

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for key, cell in list(self._cells.items()):
            cumulative, buckets = 0, []
            for le, count in zip(self._les, list(cell.counts), strict=True):
                cumulative += count
                buckets.append((le, float(cumulative)))
            family.add_metric(list(key), buckets, cell.total)
        yield family
