"""Every table that grows with traffic has a bound: estimator history, fleet stats, breakers,
per-replica metrics, upstream origins and admission lanes follow the routing table; decision
caches, prefix affinity and the fast lane's header cache hold a fixed number of entries
whatever the traffic. (Per-key state: `test_keys.py`.)"""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.core.errors import OrchestratorError
from orchestrator.core.records import ReplicaLoad
from orchestrator.forwarding.metrics import RouterMetrics
from orchestrator.frontends.http import messages
from orchestrator.frontends.http.messages import MAX_CACHED_FIELDS, header_field
from orchestrator.router_service import RouterService, profile_named
from orchestrator.routing.context import RequestContext
from orchestrator.routing.estimator import WINDOW_SCRAPES, CapacityEstimator
from orchestrator.routing.memo import DEFAULT_ENTRIES, IdentityMemo
from orchestrator.routing.plugin import RoutingView
from orchestrator.routing.plugins.scorers.prefix_affinity import ring_points
from orchestrator.routing.profile import _ELIGIBLE_ENTRIES
from orchestrator.routing.stats import ReplicaStats
from orchestrator.table.source import TableHolder
from orchestrator.table.static_file import parse_replicas

MODEL = "openai/gpt-oss-120b"


def document(ids: range) -> str:
    lines = ["apiVersion: orchestrator/v1alpha1", "kind: Replicas", f"model: {MODEL}", "replicas:"]
    for i in ids:
        lines.append(
            f'  - {{id: r-{i}, url: "http://127.0.0.1:{20000 + i}", pool: p, site: lab,'
            " generation: MI355X, engine: sim}"
        )
    return "\n".join(lines) + "\n"


def test_the_estimators_history_per_replica_is_a_fixed_window() -> None:
    estimator = CapacityEstimator(target_ttft_s=3.0, target_tpot_s=0.08)
    stats = ReplicaStats(1000.0)
    for scrape in range(2000):
        load = ReplicaLoad(8, 0, 0.1, prompt_tokens_total=50.0 * scrape,
                           generation_tokens_total=10.0 * scrape)  # fmt: skip
        estimator.update("r-0", stats, load, now_s=float(scrape))
    assert len(estimator._fits["r-0"].window) <= WINDOW_SCRAPES + 1
    estimator.forget("r-0")
    assert estimator._fits == {}


def test_per_replica_tables_follow_the_routing_table_through_churn() -> None:
    """A thousand replicas come and go, three at a time: every per-replica table ends with the
    three that are left."""

    async def scenario() -> None:
        holder = TableHolder(parse_replicas(document(range(3)), version=1))
        service = RouterService(holder, profile_named("capacity"))
        await service.start()
        try:
            for version in range(2, 334):
                live = range(3 * version, 3 * version + 3)
                table = parse_replicas(document(live), version=version)
                for replica in holder.snapshot().replicas:  # traffic touched the old ones
                    stats = service.fleet.stats(replica.replica_id) or ReplicaStats(1.0)
                    load = ReplicaLoad(1, 0, 0.0, 1.0, 1.0)
                    service.estimator.update(replica.replica_id, stats, load, now_s=1.0)
                    service.breakers.failed(replica.replica_id)
                    service.metrics.series(replica)
                    service.upstream._add_origin(replica.url)
                holder.replace(table)
                for _ in range(5):
                    await asyncio.sleep(0)
                await service.admission.admit(MODEL, RequestContext(MODEL, 1).priority)
            await asyncio.sleep(0.05)
            live_ids = {r.replica_id for r in holder.snapshot().replicas}
            assert set(service.estimator._fits) <= live_ids
            assert set(service.breakers._circuits) <= live_ids
            assert set(service.metrics._series) <= live_ids
            assert service.upstream.origins() <= 3
            assert service.fleet._stats.keys() == live_ids
            assert service.admission.lanes() <= 1
        finally:
            await service.stop()

    asyncio.run(scenario())


def test_prefix_affinity_and_decision_caches_do_not_grow_with_distinct_prompts() -> None:
    table = parse_replicas(document(range(16)))
    service = RouterService(TableHolder(table), profile_named("capacity"))
    profile = service.profile
    candidates = service.fleet.candidates(table)
    for index in range(5000):
        ctx = RequestContext(MODEL, 100, prefix_hash=index * 2654435761 % (1 << 64))
        view = RoutingView(table, 3.0, 0.08, now_s=index * 0.05)  # many cache buckets
        profile.decide(ctx, view, candidates)
        if index % 50 == 0:  # unknown models asked for, too
            other = RequestContext(f"no-such-model-{index}", 100)
            with pytest.raises(OrchestratorError):
                profile.decide(other, view, candidates)
    state = profile._state
    assert len(state.entries) <= _ELIGIBLE_ENTRIES
    assert len(state.latest) <= len(table.models)
    for step in profile.spec.scorers:
        for memo in vars(step.plugin).values() if hasattr(step.plugin, "__dict__") else ():
            if isinstance(memo, IdentityMemo):
                assert len(memo._values) <= DEFAULT_ENTRIES
    info = ring_points.cache_info()
    assert info.maxsize is not None and info.currsize <= info.maxsize


def test_the_header_line_cache_is_bounded() -> None:
    for index in range(3 * MAX_CACHED_FIELDS):
        assert header_field("x-orchestrator-replica", f"replica-{index}").endswith(b"\r\n")
        assert len(messages._FIELDS) <= MAX_CACHED_FIELDS


def test_metrics_of_a_replica_that_left_are_dropped() -> None:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    metrics = RouterMetrics(registry)
    table = parse_replicas(document(range(50)))
    for replica in table.replicas:
        metrics.series(replica).in_flight.inc()
        metrics.decided("capacity", replica)
    for replica in table.replicas:
        metrics.forget(replica)
    assert metrics._series == {} and metrics._decisions == {}
    samples = [s for f in registry.collect() for s in f.samples
               if f.name == "orchestrator_router_in_flight_requests"]  # fmt: skip
    assert samples == []
