"""Filters: each keeps exactly the replicas its rule allows, and says it may be cached."""

from __future__ import annotations

import pytest
from routing_fleet import MODEL, candidate, replica, request, view

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.records import NodeHealth, ReplicaLoad, ReplicaState
from orchestrator.routing.plugin import Candidate, Filter, RequestIndependentFilter
from orchestrator.routing.plugins import builtin_registry
from orchestrator.routing.plugins.filters.fabric_healthy import FabricHealthyFilter
from orchestrator.routing.plugins.filters.healthy import HealthyFilter
from orchestrator.routing.plugins.filters.kv_headroom import KvHeadroomFilter
from orchestrator.routing.plugins.filters.model_served import ModelServedFilter
from orchestrator.routing.plugins.filters.not_draining import NotDrainingFilter
from orchestrator.routing.plugins.filters.site_allowed import SiteAllowedFilter

FILTER_TYPES = [
    "model-served",
    "healthy",
    "not-draining",
    "kv-headroom",
    "fabric-healthy",
    "site-allowed",
]


def kept(plugin: Filter, candidates: list[Candidate], model: str = MODEL) -> list[str]:
    return [c.replica.replica_id for c in plugin.filter(request(model=model), view(), candidates)]


def test_model_served_keeps_only_replicas_of_the_requested_model() -> None:
    candidates = [
        candidate(replica("a", model=MODEL)),
        candidate(replica("b", model="other/model")),
        candidate(replica("c", model=MODEL)),
    ]
    assert kept(ModelServedFilter(), candidates) == ["a", "c"]
    assert kept(ModelServedFilter(), candidates, model="missing/model") == []


@pytest.mark.parametrize(
    ("state", "circuit_open", "is_kept"),
    [
        (ReplicaState.READY, False, True),
        (ReplicaState.DRAINING, False, True),  # draining is another filter's business
        (ReplicaState.UNHEALTHY, False, False),
        (ReplicaState.READY, True, False),  # the forwarder's circuit breaker tripped
    ],
)
def test_healthy_drops_failed_engines_and_open_circuits(
    state: ReplicaState, circuit_open: bool, is_kept: bool
) -> None:
    candidates = [candidate(replica("a", state=state), circuit_open=circuit_open)]
    assert kept(HealthyFilter(), candidates) == (["a"] if is_kept else [])


@pytest.mark.parametrize(
    ("state", "is_kept"),
    [(ReplicaState.READY, True), (ReplicaState.DRAINING, False), (ReplicaState.UNHEALTHY, True)],
)
def test_not_draining_drops_only_draining_replicas(state: ReplicaState, is_kept: bool) -> None:
    assert kept(NotDrainingFilter(), [candidate(replica("a", state=state))]) == (
        ["a"] if is_kept else []
    )


@pytest.mark.parametrize(
    ("load", "max_kv_usage", "is_kept"),
    [
        (None, 0.98, True),  # never scraped: no data is not bad data
        (ReplicaLoad(running=10, waiting=0, kv_cache_usage=0.99), 0.98, True),  # full, no queue
        (ReplicaLoad(running=10, waiting=3, kv_cache_usage=0.50), 0.98, True),  # queue, room
        (ReplicaLoad(running=10, waiting=3, kv_cache_usage=0.98), 0.98, False),  # full and queued
        (ReplicaLoad(running=10, waiting=1, kv_cache_usage=0.91), 0.90, False),  # lower threshold
    ],
)
def test_kv_headroom_drops_replicas_out_of_kv_cache_with_requests_waiting(
    load: ReplicaLoad | None, max_kv_usage: float, is_kept: bool
) -> None:
    plugin = KvHeadroomFilter.from_params("kv", {"maxKvUsage": max_kv_usage})
    assert kept(plugin, [candidate(replica("a"), load=load)]) == (["a"] if is_kept else [])


@pytest.mark.parametrize(
    ("health", "is_kept"),
    [(NodeHealth.HEALTHY, True), (NodeHealth.DEGRADED, True), (NodeHealth.UNHEALTHY, False)],
)
def test_fabric_healthy_drops_unhealthy_nodes_and_keeps_degraded_ones(
    health: NodeHealth, is_kept: bool
) -> None:
    assert kept(FabricHealthyFilter(), [candidate(replica("a", node_health=health))]) == (
        ["a"] if is_kept else []
    )


@pytest.mark.parametrize(
    ("sites", "expected"),
    [([], ["k", "u"]), (["kr"], ["k"]), (["us", "eu"], ["u"]), (["eu"], [])],
)
def test_site_allowed_keeps_listed_sites_and_an_empty_list_means_all(
    sites: list[str], expected: list[str]
) -> None:
    candidates = [candidate(replica("k", site="kr")), candidate(replica("u", site="us"))]
    assert kept(SiteAllowedFilter.from_params("sites", {"sites": sites}), candidates) == expected


@pytest.mark.parametrize("plugin_type", FILTER_TYPES)
def test_every_builtin_filter_is_request_independent_so_profiles_may_cache_it(
    plugin_type: str,
) -> None:
    plugin = builtin_registry().build(plugin_type, plugin_type, {})
    assert isinstance(plugin, RequestIndependentFilter)
    assert plugin.REQUEST_INDEPENDENT


@pytest.mark.parametrize(
    ("plugin_type", "params", "field"),
    [
        ("kv-headroom", {"maxKvUsage": 1.5}, "params.maxKvUsage"),
        ("kv-headroom", {"maxKvUsag": 0.9}, "params.maxKvUsag"),
        ("site-allowed", {"sites": "kr"}, "params.sites"),
        ("healthy", {"strict": True}, "params.strict"),
    ],
)
def test_bad_filter_params_are_rejected_naming_the_field(
    plugin_type: str, params: dict[str, object], field: str
) -> None:
    with pytest.raises(OrchestratorError) as caught:
        builtin_registry().build(plugin_type, "mine", params)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert field in caught.value.message
    assert "mine" in caught.value.message
