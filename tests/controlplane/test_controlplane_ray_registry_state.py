"""The registry's bookkeeping, as a plain object (the Ray actor only wraps it)."""

from __future__ import annotations

import pytest

from orchestrator.config import default_config
from orchestrator.controlplane.reconcile import ObservedState
from orchestrator.controlplane.registry_records import ReplicaRegistration
from orchestrator.controlplane.registry_state import RegistryState
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, NodeHealth, ReplicaLoad, ReplicaState


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def registration(replica_id: str, pool: str = "kr-mi300x", node: str = "n1") -> ReplicaRegistration:
    site, generation = (
        ("kr", Generation.MI300X) if pool == "kr-mi300x" else ("us", Generation.MI355X)
    )
    return ReplicaRegistration(
        replica_id=replica_id,
        url=f"http://127.0.0.1:{9000 + len(replica_id)}",
        pool=pool,
        site=site,
        generation=generation,
        engine=EngineKind.SIM,
        node=node,
        time_scale=10.0,
    )


def idle(at_s: float = 0.0) -> ReplicaLoad:
    return ReplicaLoad(running=0, waiting=0, kv_cache_usage=0.0, observed_at_s=at_s)


def busy() -> ReplicaLoad:
    return ReplicaLoad(running=3, waiting=1, kv_cache_usage=0.2)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def state(clock: FakeClock) -> RegistryState:
    return RegistryState(default_config(), now_s=clock, first_version=1000)


def test_a_registered_replica_is_listed_ready_with_its_capacity_stretched_by_its_time_scale(
    state: RegistryState,
) -> None:
    state.register(registration("kr-a"))
    state.register(registration("us-a", pool="us-mi355x"))
    table = state.table()
    by_id = {r.replica_id: r for r in table.replicas}
    assert set(by_id) == {"kr-a", "us-a"}
    assert by_id["kr-a"].state is ReplicaState.READY
    assert by_id["us-a"].capacity_prior_tokens_per_s > by_id["kr-a"].capacity_prior_tokens_per_s
    assert table.rtt_s("kr", "us") == pytest.approx(0.150)


def test_every_visible_change_raises_the_version_and_a_load_only_heartbeat_does_not(
    state: RegistryState,
) -> None:
    versions = [state.version]
    state.register(registration("kr-a"))
    versions.append(state.version)
    state.heartbeat("kr-a", busy())
    assert state.version == versions[-1]
    state.report_node_health("n1", NodeHealth.DEGRADED)
    versions.append(state.version)
    state.scale("kr-mi300x", 3)
    versions.append(state.version)
    state.deregister("kr-a")
    versions.append(state.version)
    assert versions == sorted(set(versions))
    assert versions[0] == 1000


def test_a_replica_whose_heartbeats_stop_is_listed_unhealthy_until_it_beats_again(
    state: RegistryState, clock: FakeClock
) -> None:
    state.register(registration("kr-a"))
    clock.now_s += 2.0
    assert not state.expire()
    clock.now_s += 2.0
    assert state.expire()
    assert state.table().replicas[0].state is ReplicaState.UNHEALTHY
    state.heartbeat("kr-a", busy())
    assert state.table().replicas[0].state is ReplicaState.READY


def test_a_heartbeat_from_a_replica_the_registry_forgot_asks_it_to_register_again(
    state: RegistryState,
) -> None:
    reply = state.heartbeat("kr-a", busy())
    assert not reply.known


def test_draining_a_pool_sets_its_size_to_zero_and_its_replicas_go_once_idle_after_the_grace(
    state: RegistryState, clock: FakeClock
) -> None:
    state.register(registration("kr-a"))
    state.register(registration("kr-b"))
    assert state.drain("kr-mi300x") == ("kr-a", "kr-b")
    assert {p.name: p.replicas for p in state.desired_pools()}["kr-mi300x"] == 0
    assert {r.state for r in state.table().replicas} == {ReplicaState.DRAINING}
    assert state.heartbeat("kr-a", idle()).state is ObservedState.DRAINING  # within the grace
    clock.now_s += 2.5
    assert state.heartbeat("kr-a", busy()).state is ObservedState.DRAINING  # still working
    assert state.heartbeat("kr-a", idle()).state is ObservedState.GONE
    assert [r.replica_id for r in state.table().replicas] == ["kr-b"]


def test_draining_one_replica_keeps_the_pool_size_so_it_is_replaced(state: RegistryState) -> None:
    state.register(registration("kr-a"))
    assert state.drain("kr-a") == ("kr-a",)
    assert {p.name: p.replicas for p in state.desired_pools()}["kr-mi300x"] == 2


def test_draining_or_scaling_something_unknown_names_what_exists(state: RegistryState) -> None:
    with pytest.raises(OrchestratorError) as drained:
        state.drain("nope")
    assert drained.value.code is ErrorCode.NOT_FOUND
    assert "kr-mi300x" in drained.value.message
    with pytest.raises(OrchestratorError) as scaled:
        state.scale("nope", 1)
    assert scaled.value.code is ErrorCode.NOT_FOUND
    with pytest.raises(OrchestratorError) as negative:
        state.scale("kr-mi300x", -1)
    assert negative.value.code is ErrorCode.INVALID_ARGUMENT


def test_node_health_is_carried_onto_the_replicas_of_that_node(state: RegistryState) -> None:
    state.register(registration("kr-a", node="n1"))
    state.register(registration("kr-b", node="n2"))
    state.report_node_health("n2", NodeHealth.UNHEALTHY)
    health = {r.replica_id: r.node_health for r in state.table().replicas}
    assert health == {"kr-a": NodeHealth.HEALTHY, "kr-b": NodeHealth.UNHEALTHY}


def test_sizes_saved_before_a_restart_override_the_config_and_unknown_pools_are_ignored(
    clock: FakeClock,
) -> None:
    before = RegistryState(default_config(), now_s=clock)
    before.scale("kr-mi300x", 4)
    before.drain("us-mi355x")
    saved = before.sizes() | {"gone-pool": 3}
    after = RegistryState(default_config(), now_s=clock, sizes=saved)
    assert {p.name: p.replicas for p in after.desired_pools()} == {"kr-mi300x": 4, "us-mi355x": 0}


def test_status_lists_gone_replicas_with_their_heartbeat_age_but_not_in_the_table(
    state: RegistryState, clock: FakeClock
) -> None:
    state.register(registration("kr-a"))
    state.drain("kr-a")
    clock.now_s += 3.0
    state.heartbeat("kr-a", idle())
    clock.now_s += 0.5
    (entry,) = state.status().replicas
    assert entry.record.state is ObservedState.GONE
    assert entry.listed is None
    assert entry.heartbeat_age_s == pytest.approx(0.5)


def test_a_restarted_registry_is_rebuilt_once_every_pool_has_re_registered_its_size(
    clock: FakeClock,
) -> None:
    restarted = RegistryState(default_config(), now_s=clock, rebuild_s=3.0)
    for replica_id, pool in (("k1", "kr-mi300x"), ("k2", "kr-mi300x"), ("u1", "us-mi355x")):
        restarted.register(registration(replica_id, pool))
        assert not restarted.rebuilt()
    restarted.register(registration("u2", "us-mi355x"))
    assert restarted.rebuilt()


def test_a_restarted_registry_missing_a_replica_is_rebuilt_when_the_window_ends_and_stays_so(
    clock: FakeClock,
) -> None:
    restarted = RegistryState(default_config(), now_s=clock, rebuild_s=3.0)
    restarted.register(registration("k1"))
    clock.now_s += 2.9
    assert not restarted.rebuilt()
    clock.now_s += 0.1
    assert restarted.rebuilt()
    restarted.deregister("k1")
    assert restarted.rebuilt()


def test_a_first_start_is_rebuilt_from_the_outset(state: RegistryState) -> None:
    assert state.rebuilt()


def test_unplaceable_reasons_show_in_status_and_leave_the_version_alone(
    state: RegistryState,
) -> None:
    version = state.version
    state.report_unplaceable({"us-mi355x": "no live node is in site 'us'"})
    assert state.status().unplaceable == {"us-mi355x": "no live node is in site 'us'"}
    assert state.version == version
    state.report_unplaceable({})
    assert state.status().unplaceable == {}
