"""A pool's learned capacity over time: bounded, and a step at an unchanged size is found once."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_controlplane_ray_registry_state import FakeClock, registration

from orchestrator.config import default_config
from orchestrator.controlplane.admin_client import PoolRow, Status, status_from_pb
from orchestrator.controlplane.capacity_history import CapacityHistory, CapacitySample
from orchestrator.controlplane.capacity_status import capacity_rows, format_capacity
from orchestrator.controlplane.grpc_translate import status_to_pb, table_from_pb, table_to_pb
from orchestrator.controlplane.registry_state import RegistryState
from orchestrator.core.records import ReplicaLoad


def run(history: CapacityHistory, per_replica: list[float], replicas: list[int]) -> list[float]:
    """Feed one sample every 5 s; returns the times at which a step was found."""
    found = []
    for i, (capacity, count) in enumerate(zip(per_replica, replicas, strict=True)):
        step = history.record("p", CapacitySample(5.0 * i, count, capacity * count))
        if step is not None:
            found.append(step.at_s)
    return found


@pytest.mark.parametrize("after", [1380.0, 700.0])
def test_a_step_up_or_down_at_an_unchanged_size_is_found_once_within_a_window(after: float) -> None:
    history = CapacityHistory(interval_s=5.0, window_s=60.0, threshold=0.15)
    per_replica = [1000.0] * 30 + [after] * 60  # the step at t = 150 s

    found = run(history, per_replica, [4] * len(per_replica))

    assert len(found) == 1 and 150.0 < found[0] <= 150.0 + 60.0
    pool = history.pools()["p"]
    assert pool.step_changes_total == 1 and pool.last_step is not None
    assert (pool.last_step.ratio > 1) is (after > 1000.0)


def test_a_pool_that_grew_is_not_a_software_step_and_noise_under_the_threshold_is_none() -> None:
    history = CapacityHistory(interval_s=5.0, window_s=60.0, threshold=0.15)
    grown = [1000.0] * 30 + [1380.0] * 30  # per replica moved, but so did the size
    sizes = [4] * 30 + [6] * 30
    noisy = [1000.0 + (50.0 if i % 2 else -50.0) for i in range(60)]

    assert run(history, grown, sizes) == []
    assert run(CapacityHistory(), noisy, [4] * 60) == []


def test_memory_is_bounded_by_the_window_not_the_running_time() -> None:
    history = CapacityHistory(interval_s=5.0, window_s=60.0)
    run(history, [1000.0] * 5000, [2] * 5000)

    assert len(history.samples("p")) <= 2 * 60 / 5 + 2


def test_the_registry_samples_learned_capacity_and_status_shows_it_per_engine_version() -> None:
    clock = FakeClock()
    state = RegistryState(default_config(), now_s=clock)
    for replica_id, version in (("kr-a", "0.10.1"), ("kr-b", "0.11.0")):
        state.register(replace(registration(replica_id), engine_version=version))
    for second in range(12):
        clock.now_s += 1.0
        for replica_id in ("kr-a", "kr-b"):
            state.heartbeat(replica_id, ReplicaLoad(2, 0, 0.1, 400.0 * second, 100.0 * second))

    status = state.status()
    routers_copy = table_from_pb(table_to_pb(state.table()))
    assert [r.engine_version for r in routers_copy.replicas] == ["0.10.1", "0.11.0"]
    pool = status.capacity["kr-mi300x"]
    assert pool.latest.replicas == 2 and pool.latest.tokens_per_s > 0
    assert pool.step_changes_total == 0

    shown = status_from_pb(status_to_pb(status))
    rows = capacity_rows(shown)
    assert [(gen, version, count) for gen, version, count, _ in rows] == [
        ("MI300X", "0.10.1", 1),
        ("MI300X", "0.11.0", 1),
    ]
    assert "0.11.0" in format_capacity(shown)


def test_status_names_each_pool_with_a_step_change_and_its_ratio() -> None:
    pools = [
        PoolRow("us-mi355x", "us", "MI355X", "vllm", 2, 2, capacity_steps=1, last_step_ratio=1.38),
        PoolRow("kr-mi300x", "kr", "MI300X", "vllm", 2, 2),
    ]

    text = format_capacity(Status(version=1, pools=pools, replicas=[]))

    assert "us-mi355x: 1 capacity step change(s) at an unchanged size, the last x1.38" in text
    assert "kr-mi300x" not in text
