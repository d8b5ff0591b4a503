"""A node's fabric and HBM health from successive readings of its counters: pure, no I/O.

Each reading holds raw counters per series (device, port, priority...) and a few gauges. Between
two readings every series grows by `counter_delta` (never negative across 32-bit wraps and
resets); rates are those growths summed over a trailing window. The verdict:

- UNHEALTHY (route elsewhere): a port not ACTIVE; more than `carrierChangesMax` carrier changes,
  any link_downed, or any retries-exceeded in the event window; PFC pause occupancy (the fraction
  of time paused, worst series) at or above `pauseOccupancyUnhealthy`.
- DEGRADED (routed at a capacity penalty): pause occupancy at or above `pauseOccupancyDegraded`;
  ACK timeouts above `ackTimeoutsPerSDegraded`; CNPs above `cnpBaselineFactor` times the node's
  own baseline and above `cnpMinPerS`; HBM use at or above `hbmUsedRatioDegraded`.
- HEALTHY otherwise.

A worse verdict is reported at once; a better one only after it has held for `holdDownS`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from orchestrator.config.fabric_health import FabricHealthSpec
from orchestrator.core.records import NodeHealth
from orchestrator.exporters.rates import counter_delta

SEVERITY: Final = {NodeHealth.HEALTHY: 0, NodeHealth.DEGRADED: 1, NodeHealth.UNHEALTHY: 2}


class Signal(StrEnum):
    """The counters health reads; each series of one is a raw, monotonic hardware counter."""

    CARRIER_CHANGES = "carrier_changes"
    LINK_DOWNED = "link_downed"
    PAUSE_DURATION_US = "pause_duration_us"
    RETRIES_EXCEEDED = "retries_exceeded"
    ACK_TIMEOUTS = "ack_timeouts"
    CNP_RECEIVED = "cnp_received"


@dataclass(frozen=True, slots=True)
class CounterValue:
    """One raw counter reading; `width_bits` is the hardware width (32 wraps at 2^32)."""

    value: int
    width_bits: int | None = None


@dataclass(frozen=True, slots=True)
class NodeReading:
    """What one scrape of a node says. `counters` maps a signal to its series (key → value).

    `ports_active` is None when the node has no RDMA port data; `hbm_used_ratio` is the fullest
    GPU's used/total (None without GPU data). `at_s` is a monotonic time in seconds.
    """

    at_s: float
    counters: Mapping[Signal, Mapping[str, CounterValue]] = field(default_factory=dict)
    ports_active: bool | None = None
    hbm_used_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class NodeRates:
    """Rates over the trailing windows; every field is >= 0 (None before a second reading)."""

    carrier_changes: int = 0
    link_downed: int = 0
    retries_exceeded: int = 0
    pause_occupancy: float = 0.0
    ack_timeouts_per_s: float = 0.0
    cnp_per_s: float = 0.0
    cnp_baseline_per_s: float | None = None


@dataclass(frozen=True, slots=True)
class HealthVerdict:
    """`health` is what to report (after hysteresis); `observed` is this reading's own verdict,
    `reasons` say why it is not HEALTHY."""

    health: NodeHealth
    observed: NodeHealth
    reasons: tuple[str, ...]
    rates: NodeRates


@dataclass(frozen=True, slots=True)
class _Step:
    """Growth of every series between two readings ending at `at_s`, `dt_s` apart."""

    at_s: float
    dt_s: float
    growth: Mapping[Signal, Mapping[str, int]]


class NodeHealthEvaluator:
    """Feed readings in time order with `observe`; each returns the node's verdict."""

    def __init__(self, spec: FabricHealthSpec) -> None:
        self._spec = spec
        self._previous: NodeReading | None = None
        self._steps: deque[_Step] = deque()
        self._cnp_baseline_per_s: float | None = None
        self._reported: NodeHealth | None = None
        self._better_since_s: float | None = None

    def observe(self, reading: NodeReading) -> HealthVerdict:
        previous, self._previous = self._previous, reading
        if previous is not None and reading.at_s > previous.at_s:
            self._steps.append(_step(previous, reading))
            horizon = max(self._spec.rate_window_s, self._spec.event_window_s)
            while self._steps and self._steps[0].at_s <= reading.at_s - horizon:
                self._steps.popleft()
        rates = self._rates(reading.at_s)
        surging = self._cnp_surging(rates)
        observed, reasons = self._judge(reading, rates, surging)
        if not surging:
            self._update_cnp_baseline()
        health = self._hysteresis(observed, reading.at_s)
        return HealthVerdict(health, observed, reasons, rates)

    def _rates(self, now_s: float) -> NodeRates:
        in_rate = [s for s in self._steps if s.at_s > now_s - self._spec.rate_window_s]
        in_events = [s for s in self._steps if s.at_s > now_s - self._spec.event_window_s]
        if not in_rate:
            return NodeRates(cnp_baseline_per_s=self._cnp_baseline_per_s)
        rate_dt = sum(s.dt_s for s in in_rate)
        pause: dict[str, int] = {}
        for step in in_rate:
            for key, grown in step.growth.get(Signal.PAUSE_DURATION_US, {}).items():
                pause[key] = pause.get(key, 0) + grown
        return NodeRates(
            carrier_changes=_total(in_events, Signal.CARRIER_CHANGES),
            link_downed=_total(in_events, Signal.LINK_DOWNED),
            retries_exceeded=_total(in_events, Signal.RETRIES_EXCEEDED),
            pause_occupancy=max(pause.values(), default=0) * 1e-6 / rate_dt,
            ack_timeouts_per_s=_total(in_rate, Signal.ACK_TIMEOUTS) / rate_dt,
            cnp_per_s=_total(in_rate, Signal.CNP_RECEIVED) / rate_dt,
            cnp_baseline_per_s=self._cnp_baseline_per_s,
        )

    def _cnp_surging(self, rates: NodeRates) -> bool:
        baseline = self._cnp_baseline_per_s
        return (
            baseline is not None
            and rates.cnp_per_s > self._spec.cnp_baseline_factor * baseline
            and rates.cnp_per_s > self._spec.cnp_min_per_s
        )

    def _judge(
        self, reading: NodeReading, rates: NodeRates, cnp_surging: bool
    ) -> tuple[NodeHealth, tuple[str, ...]]:
        spec = self._spec
        unhealthy: list[str] = []
        degraded: list[str] = []
        if reading.ports_active is False:
            unhealthy.append("an RDMA port is not ACTIVE")
        if rates.carrier_changes > spec.carrier_changes_max:
            unhealthy.append(
                f"{rates.carrier_changes} carrier changes in {spec.event_window_s:g} s"
                f" (> {spec.carrier_changes_max})"
            )
        if rates.link_downed > 0:
            unhealthy.append(f"link went down {rates.link_downed}x in {spec.event_window_s:g} s")
        if rates.retries_exceeded > 0:
            unhealthy.append(f"{rates.retries_exceeded} queue pairs exhausted their retries")
        occupancy = f"PFC pause occupancy {rates.pause_occupancy:.2f}"
        if rates.pause_occupancy >= spec.pause_occupancy_unhealthy:
            unhealthy.append(f"{occupancy} >= {spec.pause_occupancy_unhealthy:g}")
        elif rates.pause_occupancy >= spec.pause_occupancy_degraded:
            degraded.append(f"{occupancy} >= {spec.pause_occupancy_degraded:g}")
        if rates.ack_timeouts_per_s > spec.ack_timeouts_per_s_degraded:
            degraded.append(
                f"{rates.ack_timeouts_per_s:.1f} ACK timeouts/s"
                f" > {spec.ack_timeouts_per_s_degraded:g}"
            )
        if cnp_surging:
            degraded.append(
                f"{rates.cnp_per_s:.0f} CNPs/s > {spec.cnp_baseline_factor:g}x the baseline"
                f" {rates.cnp_baseline_per_s or 0:.0f}/s"
            )
        if reading.hbm_used_ratio is not None and (
            reading.hbm_used_ratio >= spec.hbm_used_ratio_degraded
        ):
            degraded.append(
                f"HBM {reading.hbm_used_ratio:.0%} used >= {spec.hbm_used_ratio_degraded:.0%}"
            )
        if unhealthy:
            return NodeHealth.UNHEALTHY, (*unhealthy, *degraded)
        if degraded:
            return NodeHealth.DEGRADED, tuple(degraded)
        return NodeHealth.HEALTHY, ()

    def _update_cnp_baseline(self) -> None:
        """An exponential average of the node's own CNP rate, frozen while a surge lasts."""
        if not self._steps:
            return
        step = self._steps[-1]
        rate = sum(step.growth.get(Signal.CNP_RECEIVED, {}).values()) / step.dt_s
        if self._cnp_baseline_per_s is None:
            self._cnp_baseline_per_s = rate
            return
        alpha = 1.0 - math.exp(-step.dt_s / self._spec.cnp_baseline_s)
        self._cnp_baseline_per_s += alpha * (rate - self._cnp_baseline_per_s)

    def _hysteresis(self, observed: NodeHealth, now_s: float) -> NodeHealth:
        reported = self._reported
        if reported is None or SEVERITY[observed] >= SEVERITY[reported]:
            self._reported = observed
            self._better_since_s = None
            return observed
        if self._better_since_s is None:
            self._better_since_s = now_s
        if now_s - self._better_since_s >= self._spec.hold_down_s:
            self._reported = observed
            self._better_since_s = None
            return observed
        return reported


def _step(previous: NodeReading, current: NodeReading) -> _Step:
    """Growth of each series present in both readings; a series that appears or vanishes
    (a device added or removed) contributes nothing until it has two readings."""
    growth: dict[Signal, dict[str, int]] = {}
    for signal, series in current.counters.items():
        before = previous.counters.get(signal, {})
        grown = {
            key: counter_delta(before[key].value, now.value, now.width_bits)
            for key, now in series.items()
            if key in before
        }
        if grown:
            growth[signal] = grown
    return _Step(current.at_s, current.at_s - previous.at_s, growth)


def _total(steps: list[_Step], signal: Signal) -> int:
    return sum(sum(step.growth.get(signal, {}).values()) for step in steps)
