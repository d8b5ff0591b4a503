"""Fixtures for the router tests: two instant simulated replicas and a router over them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from replica_server import ReplicaThread, replica
from router_harness import ReplicaEntry, RouterThread, running_router

from orchestrator.core.generations import Generation
from orchestrator.sim.replica import ReplicaSettings


@pytest.fixture(scope="module")
def instant_pair() -> Iterator[tuple[ReplicaThread, ReplicaThread]]:
    """An MI355X and an MI300X replica with time scale 0: they answer as fast as the CPU allows."""
    with (
        replica(ReplicaSettings(Generation.MI355X, time_scale=0.0, seed=1)) as fast,
        replica(ReplicaSettings(Generation.MI300X, time_scale=0.0, seed=2)) as slow,
    ):
        yield fast, slow


@pytest.fixture(scope="module")
def pair_router(instant_pair: tuple[ReplicaThread, ReplicaThread]) -> Iterator[RouterThread]:
    """The default (`capacity`) router over `instant_pair`."""
    fast, slow = instant_pair
    entries = [
        ReplicaEntry("mi355x-0", fast.url, "MI355X"),
        ReplicaEntry("mi300x-0", slow.url, "MI300X"),
    ]
    with running_router(entries) as router:
        yield router
