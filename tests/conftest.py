"""Shared fixtures: real simulated replicas on loopback."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Tests start Ray nodes (fork + exec) from a process whose gRPC threads are busy; gRPC's fork
# handlers then run in the child before exec and can abort it ("Check failed: ... KICKED"), which
# kills the new raylet. The children exec at once and never use gRPC, so the handlers are not
# needed. Read when gRPC initialises: set before anything imports it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

sys.path.insert(0, str(Path(__file__).parent))

from replica_server import ReplicaThread, replica

from orchestrator.core.generations import Generation
from orchestrator.sim.replica import ReplicaSettings


@pytest.fixture
def instant_replica() -> Iterator[ReplicaThread]:
    """An MI355X replica with time scale 0: answers as fast as the CPU allows."""
    with replica(ReplicaSettings(Generation.MI355X, time_scale=0.0, seed=7)) as server:
        yield server
