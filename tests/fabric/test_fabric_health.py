"""Node health from counter readings: thresholds, the CNP baseline, hysteresis, wraps and resets.

Pure: readings are built by hand, one a second, from per-second rates of each signal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.config import ConfigError, FabricHealthSpec, parse_config
from orchestrator.config.defaults import default_config_text
from orchestrator.core.records import NodeHealth
from orchestrator.fabric.health import (
    CounterValue,
    HealthVerdict,
    NodeHealthEvaluator,
    NodeReading,
    Signal,
)

SPEC = FabricHealthSpec()
Q32 = 1 << 32


class Node:
    """A node whose counters grow by given per-second rates; `tick` reads and evaluates it."""

    def __init__(self, spec: FabricHealthSpec = SPEC) -> None:
        self.evaluator = NodeHealthEvaluator(spec)
        self.now_s = 0.0
        self.values: dict[Signal, float] = dict.fromkeys(Signal, 0.0)
        self.ports_active: bool | None = True
        self.hbm_used_ratio: float | None = 0.4

    def tick(self, per_s: Mapping[Signal, float] | None = None, dt_s: float = 1.0) -> HealthVerdict:
        self.now_s += dt_s
        for signal, rate in (per_s or {}).items():
            self.values[signal] += rate * dt_s
        counters = {
            s: {"mlx5_0,1,mlx5": CounterValue(int(v), 32 if s is Signal.ACK_TIMEOUTS else None)}
            for s, v in self.values.items()
        }
        return self.evaluator.observe(
            NodeReading(self.now_s, counters, self.ports_active, self.hbm_used_ratio)
        )

    def run(self, seconds: int, per_s: Mapping[Signal, float] | None = None) -> HealthVerdict:
        verdict = self.tick(per_s)
        for _ in range(seconds - 1):
            verdict = self.tick(per_s)
        return verdict


BASELINE = {Signal.CNP_RECEIVED: 40.0, Signal.PAUSE_DURATION_US: 2_000.0}


def test_a_quiet_node_with_ordinary_congestion_noise_is_healthy() -> None:
    verdict = Node().run(30, BASELINE)
    assert verdict.health is NodeHealth.HEALTHY
    assert verdict.reasons == ()


@pytest.mark.parametrize(
    ("occupancy", "expected"),
    [(0.05, NodeHealth.HEALTHY), (0.2, NodeHealth.DEGRADED), (0.6, NodeHealth.UNHEALTHY)],
)
def test_pfc_pause_occupancy_grades_the_node(occupancy: float, expected: NodeHealth) -> None:
    node = Node()
    node.run(10, BASELINE)
    verdict = node.run(10, {**BASELINE, Signal.PAUSE_DURATION_US: occupancy * 1e6})
    assert verdict.health is expected
    assert verdict.rates.pause_occupancy == pytest.approx(occupancy)


def test_more_carrier_changes_than_allowed_in_the_window_make_the_node_unhealthy() -> None:
    node = Node()
    node.run(5, BASELINE)
    node.values[Signal.CARRIER_CHANGES] += 2  # one flap: down and up
    assert node.tick(BASELINE).health is NodeHealth.HEALTHY
    node.values[Signal.CARRIER_CHANGES] += 2
    verdict = node.tick(BASELINE)
    assert verdict.health is NodeHealth.UNHEALTHY
    assert "4 carrier changes" in verdict.reasons[0]


@pytest.mark.parametrize("signal", [Signal.LINK_DOWNED, Signal.RETRIES_EXCEEDED])
def test_a_single_link_down_or_exhausted_retry_makes_the_node_unhealthy(signal: Signal) -> None:
    node = Node()
    node.run(5, BASELINE)
    node.values[signal] += 1
    assert node.tick(BASELINE).health is NodeHealth.UNHEALTHY


def test_a_port_that_is_not_active_makes_the_node_unhealthy_at_once() -> None:
    node = Node()
    node.ports_active = False
    assert node.tick().health is NodeHealth.UNHEALTHY


def test_ack_timeouts_above_one_per_second_degrade_the_node() -> None:
    node = Node()
    node.run(10, BASELINE)
    assert node.run(6, {**BASELINE, Signal.ACK_TIMEOUTS: 0.5}).health is NodeHealth.HEALTHY
    assert node.run(6, {**BASELINE, Signal.ACK_TIMEOUTS: 5.0}).health is NodeHealth.DEGRADED


def test_cnp_rate_is_judged_against_the_nodes_own_baseline() -> None:
    busy = Node()
    steady = busy.run(60, {Signal.CNP_RECEIVED: 3_000.0})
    assert steady.health is NodeHealth.HEALTHY, "a high CNP rate that is normal for this node"
    surge = busy.run(6, {Signal.CNP_RECEIVED: 30_000.0})
    assert surge.health is NodeHealth.DEGRADED
    lasting = busy.run(120, {Signal.CNP_RECEIVED: 30_000.0})
    assert lasting.health is NodeHealth.DEGRADED, "a surge does not become its own baseline"
    assert lasting.rates.cnp_baseline_per_s == pytest.approx(3_000.0, rel=0.1)

    quiet = Node()
    quiet.run(60, {Signal.CNP_RECEIVED: 10.0})
    small = quiet.run(6, {Signal.CNP_RECEIVED: 900.0})
    assert small.health is NodeHealth.HEALTHY, "below cnpMinPerS even at 90x the baseline"


def test_hbm_nearly_full_degrades_the_node() -> None:
    node = Node()
    node.hbm_used_ratio = 0.97
    assert node.tick().health is NodeHealth.DEGRADED


def test_recovery_waits_for_the_hold_down_but_worsening_is_immediate() -> None:
    spec = FabricHealthSpec(rateWindowS=2, holdDownS=5)
    node = Node(spec)
    node.run(5, BASELINE)
    storm = {**BASELINE, Signal.PAUSE_DURATION_US: 0.9e6}
    assert node.run(2, storm).health is NodeHealth.UNHEALTHY
    verdicts = [node.tick(BASELINE) for _ in range(10)]
    better = next(i for i, v in enumerate(verdicts) if v.observed is not NodeHealth.UNHEALTHY)
    healthy = next(i for i, v in enumerate(verdicts) if v.health is NodeHealth.HEALTHY)
    assert all(v.health is NodeHealth.UNHEALTHY for v in verdicts[:healthy])
    assert healthy - better == 5, "reported once better for holdDownS (5 readings, 1 s apart)"
    assert node.tick(storm).health is not NodeHealth.HEALTHY


def test_a_relapse_during_the_hold_down_restarts_it() -> None:
    spec = FabricHealthSpec(rateWindowS=1, holdDownS=4)
    node = Node(spec)
    node.run(3, BASELINE)
    node.run(1, {**BASELINE, Signal.PAUSE_DURATION_US: 0.9e6})
    node.run(3, BASELINE)  # 3 s clean, hold-down not over
    assert node.tick({**BASELINE, Signal.PAUSE_DURATION_US: 0.9e6}).health is (NodeHealth.UNHEALTHY)
    assert node.run(3, BASELINE).health is NodeHealth.UNHEALTHY
    assert node.run(2, BASELINE).health is NodeHealth.HEALTHY


def test_a_32_bit_wrap_counts_the_distance_round_the_ring() -> None:
    node = Node()
    node.values[Signal.ACK_TIMEOUTS] = Q32 - 3
    node.run(10, BASELINE)
    node.values[Signal.ACK_TIMEOUTS] = 5.0  # wrapped: 8 timeouts in one second
    verdict = node.tick(BASELINE)
    assert verdict.rates.ack_timeouts_per_s == pytest.approx(8 / SPEC.rate_window_s)


def test_a_counter_reset_counts_from_zero_not_backwards() -> None:
    node = Node()
    node.values[Signal.PAUSE_DURATION_US] = 5e9
    node.run(6, BASELINE)
    node.values[Signal.PAUSE_DURATION_US] = 1_000.0  # driver reload
    verdict = node.tick(BASELINE)
    assert 0 <= verdict.rates.pause_occupancy < 0.01


counter_values = st.one_of(
    st.integers(min_value=0, max_value=Q32 - 1),
    st.sampled_from([0, 1, Q32 - 1, Q32 // 2, (1 << 63) - 1]),
)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0.01, max_value=5.0),
            st.fixed_dictionaries({s: counter_values for s in Signal}),
            st.sampled_from([None, 32]),
        ),
        min_size=2,
        max_size=25,
    )
)
def test_resets_and_wraps_never_produce_negative_rates(
    steps: list[tuple[float, dict[Signal, int], int | None]],
) -> None:
    evaluator = NodeHealthEvaluator(SPEC)
    now = 0.0
    for dt, values, width in steps:
        now += dt
        counters = {s: {"k": CounterValue(v, width)} for s, v in values.items()}
        verdict = evaluator.observe(NodeReading(now, counters, True, 0.5))
        rates = verdict.rates
        for value in (
            rates.carrier_changes, rates.link_downed, rates.retries_exceeded,
            rates.pause_occupancy, rates.ack_timeouts_per_s, rates.cnp_per_s,
            rates.cnp_baseline_per_s or 0.0,
        ):  # fmt: skip
            assert value >= 0 and math.isfinite(value)
        assert verdict.health in NodeHealth


def test_thresholds_come_from_the_config_and_bad_ones_name_their_field() -> None:
    text = default_config_text() + "fabricHealth: {pauseOccupancyUnhealthy: 0.3, holdDownS: 1}\n"
    config = parse_config(text, source="test")
    assert config.fabric_health.pause_occupancy_unhealthy == 0.3
    assert config.fabric_health.hold_down_s == 1
    assert config.fabric_health.carrier_changes_max == SPEC.carrier_changes_max

    bad = default_config_text() + "fabricHealth: {pauseOccupancyUnhealthy: 1.5, flaps: 2}\n"
    with pytest.raises(ConfigError) as raised:
        parse_config(bad, source="test")
    message = str(raised.value)
    assert "fabricHealth.pauseOccupancyUnhealthy" in message
    assert "fabricHealth.flaps" in message
