"""Shared fixtures: real simulated replicas on loopback."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from replica_server import ReplicaThread, replica

from orchestrator.core.generations import Generation
from orchestrator.sim.replica import ReplicaSettings


@pytest.fixture
def instant_replica() -> Iterator[ReplicaThread]:
    """An MI355X replica with time scale 0: answers as fast as the CPU allows."""
    with replica(ReplicaSettings(Generation.MI355X, time_scale=0.0, seed=7)) as server:
        yield server
