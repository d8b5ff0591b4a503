"""Fault → routing → recovery on a running `orchestrator up`, under steady load.

One stack (one MI355X and one MI300X replica, each on a simulated node of its own, so a fault on
the MI355X node reaches that replica alone) serves both scenarios; a real Prometheus scrapes its
exporters with the shipped rules (short `for:`). Per scenario: inject with `orchestrator fault`,
check the replica stops receiving new requests within 10 s and the matching alert fires, clear,
check its traffic returns within 30 s, and that no request failed. The times are printed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest
from stack_under_load import RunningStack, SteadyLoad, running_stack

from orchestrator.controlplane.admin_client import ControlPlaneClient
from orchestrator.monitoring.local_prometheus import LocalPrometheus
from orchestrator.monitoring.rules import render_rules
from orchestrator.monitoring.scrape_config import ScrapeTarget

pytestmark = pytest.mark.slow

FAULTED_NODE = "us-mi355x"
AVOID_WITHIN_S = 10.0
RETURN_WITHIN_S = 30.0
ALERT_WITHIN_S = 60.0
ALERT_FOR_S = 2.0


@dataclass
class Fixture:
    stack: RunningStack
    load: SteadyLoad
    prometheus: LocalPrometheus
    faulted_replica: str


@pytest.fixture(scope="module")
def world() -> Iterator[Fixture]:
    with running_stack() as stack:
        targets = [ScrapeTarget("router", urlsplit(stack.http).netloc)] + [
            ScrapeTarget("exporter", urlsplit(url).netloc) for url in stack.exporters.values()
        ]
        rules = render_rules(max_for_s=ALERT_FOR_S)
        with LocalPrometheus(targets, rules=rules) as prometheus, SteadyLoad(stack.http) as load:
            replicas = stack.status()["replicas"]
            faulted = next(r["id"] for r in replicas if r["pool"] == FAULTED_NODE)
            yield Fixture(stack, load, prometheus, faulted)


def eventually(check, timeout_s: float, what: str) -> float:  # type: ignore[no-untyped-def]
    """Poll `check` until true; returns the monotonic time it first was."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
        time.sleep(0.2)
    return time.monotonic()


def firing(prometheus: LocalPrometheus, names: set[str]) -> bool:
    return any(
        a["labels"].get("alertname") in names
        and a["labels"].get("node") == FAULTED_NODE
        and a["state"] == "firing"
        for a in prometheus.alerts()
    )


def fault_and_recover(world: Fixture, kind: str, alerts: set[str]) -> dict[str, float]:
    stack, load, replica = world.stack, world.load, world.faulted_replica
    eventually(
        lambda: load.served_by(replica, time.monotonic() - 3),
        30,
        f"{replica} serves traffic before the fault",
    )
    injected = time.monotonic()
    result = stack.orchestrator("fault", "inject", "--node", FAULTED_NODE, "--kind", kind)
    assert result.returncode == 0, result.stderr
    assert replica in result.stdout

    control_plane = ControlPlaneClient(stack.control_plane)
    unhealthy = eventually(
        lambda: any(
            r.id == replica and r.health == "unhealthy" for r in control_plane.status().replicas
        ),
        AVOID_WITHIN_S,
        f"{replica} reported unhealthy after {kind}",
    )
    alerted = eventually(
        lambda: firing(world.prometheus, alerts), ALERT_WITHIN_S, f"one of {alerts} fires"
    )
    quiet_from = injected + AVOID_WITHIN_S
    time.sleep(max(0.0, quiet_from + 3.0 - time.monotonic()))
    cleared = time.monotonic()
    assert not load.served_by(replica, quiet_from, cleared), (
        f"{replica} still got new requests {AVOID_WITHIN_S:g} s after {kind}"
    )
    assert load.sent(quiet_from, cleared), "the other replica took the load meanwhile"
    avoided_by = max((r.started_s for r in load.served_by(replica, injected)), default=injected)

    result = stack.orchestrator("fault", "clear", "--node", FAULTED_NODE)
    assert result.returncode == 0, result.stderr
    assert f"cleared {kind}" in result.stdout
    returned = eventually(
        lambda: load.served_by(replica, cleared),
        RETURN_WITHIN_S,
        f"{replica} receives requests again after clearing {kind}",
    )
    assert not load.failures(), f"requests failed: {load.failures()[:3]}"
    figures = {
        "reported_unhealthy_s": unhealthy - injected,
        "time_to_avoid_s": avoided_by - injected,
        "alert_firing_s": alerted - injected,
        "time_to_return_s": load.served_by(replica, cleared)[0].started_s - cleared,
        "requests": float(len(load.records)),
    }
    print(f"\n{kind}: " + ", ".join(f"{k} {v:.1f}" for k, v in figures.items()))
    assert returned - cleared <= RETURN_WITHIN_S
    return figures


def test_a_pfc_storm_moves_traffic_off_the_replica_fires_an_alert_and_it_returns(
    world: Fixture,
) -> None:
    fault_and_recover(world, "pfc-storm", {"NicPfcPauseOccupancyHigh", "NicPauseStorm"})


def test_a_flapping_link_moves_traffic_off_the_replica_fires_an_alert_and_it_returns(
    world: Fixture,
) -> None:
    fault_and_recover(world, "link-flap", {"RdmaLinkDowned", "NicLinkFlapping"})
