"""The routing table carries each replica's load: heartbeats fill it, watchers get deltas of what
changed, an unreadable page is counted and shown as unknown load, and the wire keeps it all."""

from __future__ import annotations

import pytest
from test_controlplane_ray_registry_state import FakeClock, registration

from orchestrator.config import default_config
from orchestrator.controlplane.grpc_translate import (
    delta_from_pb,
    delta_to_pb,
    status_to_pb,
    table_from_pb,
    table_to_pb,
)
from orchestrator.controlplane.registry_state import RegistryState
from orchestrator.core.records import ReplicaLoad


def load(running: int, generated: float, at_s: float, waiting: int = 0) -> ReplicaLoad:
    return ReplicaLoad(running, waiting, 0.3, 4.0 * generated, generated, at_s)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def state(clock: FakeClock) -> RegistryState:
    fresh = RegistryState(default_config(), now_s=clock, first_version=1000)
    for replica_id in ("kr-a", "kr-b", "kr-c"):
        fresh.register(registration(replica_id))
    return fresh


def test_heartbeats_put_load_in_the_table_without_bumping_its_version(
    state: RegistryState, clock: FakeClock
) -> None:
    version = state.version
    state.heartbeat("kr-a", load(7, 100.0, at_s=5.0, waiting=2))
    clock.now_s += 0.4

    table = state.table()

    assert table.version == version
    report = table.loads["kr-a"]
    assert report.load is not None and (report.load.running, report.load.waiting) == (7, 2)
    assert report.age_s == pytest.approx(0.4)
    assert report.capacity_tokens_per_s == table.replica("kr-a").capacity_prior_tokens_per_s  # type: ignore[union-attr]
    assert set(table.loads) == {"kr-a"}  # no report yet for the others: none invented

    state.heartbeat("kr-b", load(1, 10.0, at_s=5.0), age_s=0.3)  # read 0.3 s before it was sent
    assert state.table().loads["kr-b"].age_s == pytest.approx(0.3)  # dated from its scrape


def test_a_delta_holds_only_the_replicas_that_reported_since_the_version_asked_for(
    state: RegistryState,
) -> None:
    state.heartbeat("kr-a", load(1, 10.0, at_s=1.0))
    state.heartbeat("kr-b", load(2, 10.0, at_s=1.0))
    seen = state.load_version
    state.heartbeat("kr-b", load(3, 20.0, at_s=2.0))
    state.heartbeat("kr-c", load(4, 20.0, at_s=2.0))

    delta = state.loads_since(seen)

    assert [r.replica_id for r in delta.loads] == ["kr-b", "kr-c"]
    assert delta.loads[0].load is not None and delta.loads[0].load.running == 3
    assert delta.load_version == state.load_version > seen
    assert delta.version == state.version
    assert state.loads_since(delta.load_version).loads == ()


def test_an_unreadable_page_keeps_the_replica_listed_with_its_load_unknown_and_counted(
    state: RegistryState,
) -> None:
    state.heartbeat("kr-a", load(5, 10.0, at_s=1.0))
    for _ in range(2):
        state.heartbeat("kr-a", None, "metrics page lacks vllm:num_requests_waiting: load unknown")

    table = state.table()
    report = table.loads["kr-a"]

    assert table.replica("kr-a") is not None
    assert report.load is None  # unknown, not the last figure and not idle
    assert report.adapter_errors_total == 2
    assert "vllm:num_requests_waiting" in report.problem
    [entry] = [e for e in status_to_pb(state.status()).replicas if e.id == "kr-a"]
    assert not entry.load.known and entry.load.adapter_errors_total == 2
    assert "vllm:num_requests_waiting" in entry.load.adapter_error


def test_the_capacity_is_learned_once_where_the_heartbeats_arrive(state: RegistryState) -> None:
    prior = state.table().replica("kr-a").capacity_prior_tokens_per_s  # type: ignore[union-attr]
    # A batch of 4 producing 4 tokens per 80 ms-scaled step: far slower than the prior says.
    for second in range(40):
        state.heartbeat("kr-a", load(4, 10.0 * second, at_s=float(second), waiting=5))

    learned = state.table().loads["kr-a"].capacity_tokens_per_s

    assert learned is not None and learned < 0.5 * prior


def test_loads_cross_the_wire_dated_on_the_receivers_clock(
    state: RegistryState, clock: FakeClock
) -> None:
    state.heartbeat("kr-a", load(7, 100.0, at_s=5.0))
    state.heartbeat("kr-b", None, "metrics page lacks vllm:kv_cache_usage_perc: load unknown")
    clock.now_s += 0.25
    table = state.table()

    received = table_from_pb(table_to_pb(table), received_at_s=50.0)

    assert received.load_version == table.load_version
    a, b = received.loads["kr-a"], received.loads["kr-b"]
    assert a.load is not None and a.load.running == 7
    assert a.load.generation_tokens_total == 100.0
    assert a.load.observed_at_s == pytest.approx(50.0 - 0.25)
    assert a.capacity_tokens_per_s == table.loads["kr-a"].capacity_tokens_per_s
    assert b.load is None and b.adapter_errors_total == 1 and "kv_cache" in b.problem
    delta = delta_from_pb(delta_to_pb(state.loads_since(0)), received_at_s=9.0)
    assert [r.replica_id for r in delta.loads] == ["kr-a", "kr-b"]


def test_an_old_watcher_gets_whole_snapshots_without_loads(state: RegistryState) -> None:
    state.heartbeat("kr-a", load(7, 100.0, at_s=5.0))

    message = table_to_pb(state.table(), with_loads=False)

    assert not message.loads and not message.loads_only
    assert len(message.replicas) == 3
