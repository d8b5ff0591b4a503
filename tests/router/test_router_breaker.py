"""A replica's circuit opens after consecutive failures, stays open for its cool-down while health
checks fail, lets exactly one probe through once a health check passes, and closes on success."""

from __future__ import annotations

import pytest

from orchestrator.core.clock import ManualClock
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, Replica
from orchestrator.forwarding.breaker import BreakerSettings, BreakerState, CircuitBreakers
from orchestrator.routing.fleet_state import FleetState
from orchestrator.table.snapshot import RoutingTable

ID = "r-0"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def fleet() -> FleetState:
    replica = Replica(
        ID, "http://r", "m", "pool", "site", Generation.MI355X, EngineKind.SIM, 1000.0
    )
    state = FleetState()
    state.sync(RoutingTable(version=1, replicas=(replica,)))
    return state


@pytest.fixture
def breakers(fleet: FleetState, clock: ManualClock) -> CircuitBreakers:
    return CircuitBreakers(fleet, BreakerSettings(failure_threshold=3, open_s=5.0), clock)


def circuit_open(fleet: FleetState) -> bool:
    stats = fleet.stats(ID)
    assert stats is not None
    return stats.circuit_open


def open_circuit(breakers: CircuitBreakers) -> None:
    for _ in range(3):
        breakers.failed(ID)


def test_consecutive_failures_open_the_circuit_and_a_success_in_between_resets_the_count(
    breakers: CircuitBreakers, fleet: FleetState
) -> None:
    breakers.failed(ID)
    breakers.failed(ID)
    breakers.succeeded(ID)
    breakers.failed(ID)
    breakers.failed(ID)
    assert breakers.state(ID) is BreakerState.CLOSED and breakers.allow(ID)

    breakers.failed(ID)

    assert breakers.state(ID) is BreakerState.OPEN
    assert not breakers.allow(ID)
    assert circuit_open(fleet)


def test_an_open_circuit_stays_open_while_health_checks_fail_or_the_cool_down_runs(
    breakers: CircuitBreakers, clock: ManualClock
) -> None:
    open_circuit(breakers)

    clock.advance(4.9)
    breakers.health_checked(ID, healthy=True)
    assert breakers.state(ID) is BreakerState.OPEN
    clock.advance(60.0)
    breakers.health_checked(ID, healthy=False)
    assert breakers.state(ID) is BreakerState.OPEN
    assert not breakers.allow(ID)


def test_after_the_cool_down_a_passing_health_check_lets_exactly_one_probe_through(
    breakers: CircuitBreakers, clock: ManualClock, fleet: FleetState
) -> None:
    open_circuit(breakers)
    clock.advance(5.0)

    breakers.health_checked(ID, healthy=True)

    assert breakers.state(ID) is BreakerState.HALF_OPEN
    assert not circuit_open(fleet)  # routable again, for the probe
    assert breakers.allow(ID)
    assert circuit_open(fleet)  # the probe is out: keep the others away
    assert not breakers.allow(ID)
    breakers.succeeded(ID)
    assert breakers.state(ID) is BreakerState.CLOSED
    assert not circuit_open(fleet)
    assert breakers.allow(ID) and breakers.allow(ID)


def test_a_failed_probe_reopens_the_circuit_for_another_cool_down(
    breakers: CircuitBreakers, clock: ManualClock
) -> None:
    open_circuit(breakers)
    clock.advance(5.0)
    breakers.health_checked(ID, healthy=True)
    assert breakers.allow(ID)

    breakers.failed(ID)

    assert breakers.state(ID) is BreakerState.OPEN
    clock.advance(4.0)
    breakers.health_checked(ID, healthy=True)
    assert breakers.state(ID) is BreakerState.OPEN


def test_a_probe_that_ends_without_a_verdict_frees_the_slot_for_the_next(
    breakers: CircuitBreakers, clock: ManualClock
) -> None:
    open_circuit(breakers)
    clock.advance(5.0)
    breakers.health_checked(ID, healthy=True)
    assert breakers.allow(ID)

    breakers.released(ID)  # the client went away mid-probe

    assert breakers.allow(ID)


def test_failing_health_checks_alone_open_a_circuit(
    breakers: CircuitBreakers, fleet: FleetState
) -> None:
    for _ in range(3):
        breakers.health_checked(ID, healthy=False)

    assert breakers.state(ID) is BreakerState.OPEN and circuit_open(fleet)


def test_settings_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="failure_threshold"):
        BreakerSettings(failure_threshold=0)
    with pytest.raises(ValueError, match="open_s"):
        BreakerSettings(open_s=-1)
