"""The router series the dashboards and alerts need: routing decisions carry the site, and the
routable-replica gauge reads 0 (not "no data") once a model's last replica is gone."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, Replica
from orchestrator.forwarding.metrics import RouterMetrics


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_decisions_are_counted_by_site_pool_and_generation() -> None:
    registry = CollectorRegistry()
    metrics = RouterMetrics(registry)
    replica = Replica(
        replica_id="us-0", url="http://127.0.0.1:1", model="m", pool="us-mi355x", site="us",
        generation=Generation.MI355X, engine=EngineKind.SIM, capacity_prior_tokens_per_s=1.0,
    )  # fmt: skip
    metrics.decided("capacity", replica)
    metrics.decided("capacity", replica)
    labels = {"profile": "capacity", "site": "us", "pool": "us-mi355x", "generation": "MI355X"}
    assert sample(registry, "orchestrator_router_decisions_total", **labels) == 2


def test_a_model_whose_replicas_are_all_gone_reads_zero_routable() -> None:
    registry = CollectorRegistry()
    metrics = RouterMetrics(registry)
    metrics.count_routable({"a": 2, "b": 1})
    assert sample(registry, "orchestrator_router_routable_replicas", model="a") == 2
    metrics.count_routable({"b": 0})
    assert sample(registry, "orchestrator_router_routable_replicas", model="a") == 0
    assert sample(registry, "orchestrator_router_routable_replicas", model="b") == 0


def test_each_replica_of_the_table_has_one_info_series_with_its_engine_version() -> None:
    registry = CollectorRegistry()
    metrics = RouterMetrics(registry)
    old, new = (
        Replica(
            replica_id=f"us-{i}",
            url="http://127.0.0.1:1",
            model="m",
            pool="us-mi355x",
            site="us",
            generation=Generation.MI355X,
            engine=EngineKind.VLLM,
            capacity_prior_tokens_per_s=1.0,
            engine_version=version,
        )
        for i, version in enumerate(("0.10.1", "0.11.0"))
    )
    labels = {"site": "us", "pool": "us-mi355x", "generation": "MI355X"}
    metrics.show_replicas([old, new])
    metrics.show_replicas([new])  # the old one left the table

    info = "orchestrator_router_replica_info"
    assert sample(registry, info, **labels, replica="us-1", engine_version="0.11.0") == 1
    assert sample(registry, info, **labels, replica="us-0", engine_version="0.10.1") is None
