"""Turn one exporter scrape (its samples, in base units) into the `NodeReading` health reads.

The exporter has already mapped every driver's counter names to the common metric names, so
health is driver-neutral: it reads metrics, never files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Final

from orchestrator.exporters import names as n
from orchestrator.exporters.samples import Sample
from orchestrator.exporters.server import ExporterHandle
from orchestrator.fabric.health import CounterValue, NodeReading, Signal

ACTIVE_PORT_STATE: Final = 4  # `4: ACTIVE` in `ports/<p>/state`
_FULL_WIDTH: Final = 64
# Each signal's metric, and the factor from its exposed base unit back to a whole raw count.
SIGNAL_METRICS: Final[Mapping[Signal, tuple[str, float]]] = MappingProxyType(
    {
        Signal.CARRIER_CHANGES: (n.NIC_CARRIER_CHANGES, 1.0),
        Signal.LINK_DOWNED: (n.RDMA_PORT_LINK_DOWNED, 1.0),
        Signal.PAUSE_DURATION_US: (n.NIC_PFC_PAUSE_DURATION, 1e6),  # seconds → µs
        Signal.RETRIES_EXCEEDED: (n.RDMA_RETRIES_EXCEEDED, 1.0),
        Signal.ACK_TIMEOUTS: (n.RDMA_LOCAL_ACK_TIMEOUTS, 1.0),
        Signal.CNP_RECEIVED: (n.RDMA_CNP_RECEIVED, 1.0),
    }
)
_SIGNAL_OF: Final = {metric: (signal, scale) for signal, (metric, scale) in SIGNAL_METRICS.items()}


def reading_from_samples(samples: Iterable[Sample], at_s: float) -> NodeReading:
    """The health-relevant part of one scrape taken at monotonic time `at_s`."""
    counters: dict[Signal, dict[str, CounterValue]] = {}
    port_states: list[float] = []
    hbm_used: dict[tuple[str, ...], float] = {}
    hbm_total: dict[tuple[str, ...], float] = {}
    for sample in samples:
        found = _SIGNAL_OF.get(sample.metric)
        if found is not None:
            signal, factor = found
            width = None if sample.width_bits >= _FULL_WIDTH else sample.width_bits
            counters.setdefault(signal, {})[",".join(sample.labels)] = CounterValue(
                round(sample.value * factor), width
            )
        elif sample.metric == n.RDMA_PORT_STATE:
            port_states.append(sample.value)
        elif sample.metric == n.GPU_HBM_USED:
            hbm_used[sample.labels] = sample.value
        elif sample.metric == n.GPU_HBM_TOTAL:
            hbm_total[sample.labels] = sample.value
    ratios = [used / hbm_total[gpu] for gpu, used in hbm_used.items() if hbm_total.get(gpu)]
    return NodeReading(
        at_s=at_s,
        counters=counters,
        ports_active=all(s == ACTIVE_PORT_STATE for s in port_states) if port_states else None,
        hbm_used_ratio=max(ratios) if ratios else None,
    )


def exporter_reader(handle: ExporterHandle) -> Callable[[float], NodeReading]:
    """Read a running exporter in process (the same collectors its `/metrics` serves)."""

    def read(at_s: float) -> NodeReading:
        return reading_from_samples(handle.exporter.scrape().samples, at_s)

    return read
