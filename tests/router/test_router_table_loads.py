"""A router that follows the control plane takes each replica's load from the routing table: it
never scrapes, takes the control plane's capacity, and counts its own sends on top."""

from __future__ import annotations

import asyncio

from orchestrator.core.records import LoadReport, ReplicaLoad
from orchestrator.forwarding.scraper import ReplicaScraper
from orchestrator.router_service import RouterService, profile_named
from orchestrator.table.source import TableHolder
from orchestrator.table.static_file import parse_replicas

REPLICAS = """
apiVersion: orchestrator/v1alpha1
kind: Replicas
model: openai/gpt-oss-120b
replicas:
  - {id: a, url: "http://127.0.0.1:9", pool: p, site: s, generation: MI355X, engine: vllm}
  - {id: b, url: "http://127.0.0.1:9", pool: p, site: s, generation: MI355X, engine: vllm}
"""


def following_router() -> RouterService:
    return RouterService(
        TableHolder(parse_replicas(REPLICAS)), profile_named("capacity"), scrape_replicas=False
    )


def test_a_report_sets_the_load_the_shared_capacity_and_others_fixed_at_the_scrape() -> None:
    """Others: the engine's requests at the scrape less what this router had in flight then; a
    request it sent after the scrape is not in the engine's figure, so it is not taken off."""
    router = following_router()
    router.apply_loads([])
    replica = router.table.snapshot().replica("a")
    assert replica is not None
    router.fleet.started(replica)
    engine = ReplicaLoad(running=6, waiting=1, kv_cache_usage=0.4, observed_at_s=0.0)
    now = router.clock.now()  # after the send: the engine's 7 hold it
    report = LoadReport("a", ReplicaLoad(6, 1, 0.4, observed_at_s=now), 0.0, 1234.0)

    router.apply_loads([report, LoadReport("gone", engine, 0.1, 99.0)])
    router.fleet.started(replica)

    stats = router.fleet.stats("a")
    assert stats is not None and stats.load is not None
    assert stats.others == 6 + 1 - 1
    assert stats.in_flight == 2
    assert stats.capacity_tokens_per_s == 1234.0
    assert stats.load_known(router.clock.now())
    assert not stats.load_known(router.clock.now() + router.settings.load_stale_after_s)
    assert router.fleet.stats("gone") is None

    scraped_before = router.clock.now() - 10.0  # before both sends
    router.apply_loads([LoadReport("a", ReplicaLoad(6, 1, 0.4, observed_at_s=scraped_before))])
    assert stats.others == 6 + 1


def test_an_adapter_error_in_the_table_makes_the_load_unknown_with_its_reason() -> None:
    router = following_router()
    router.apply_loads([LoadReport("b", None, 0.0, None, 3, "metrics page lacks x")])

    stats = router.fleet.stats("b")

    assert stats is not None and stats.load is None
    assert stats.load_problem == "metrics page lacks x"
    assert not stats.load_known(router.clock.now())


def test_a_following_router_runs_no_scraper() -> None:
    async def scenario() -> list[str]:
        router = following_router()
        await router.start()
        try:
            return sorted(task.get_name() for task in router._tasks)
        finally:
            await router.stop()

    assert asyncio.run(scenario()) == ["router-table"]


def test_the_file_fed_scraper_slows_its_rounds_as_the_fleet_grows() -> None:
    scraper = following_router().scraper

    assert isinstance(scraper, ReplicaScraper)
    assert scraper.round_s(8) == scraper.interval_s == 1.0
    assert scraper.round_s(512) == 512 / scraper.pages_per_s == 8.0
    assert scraper.stale_after_s(512) == 24.0


def test_the_routable_count_moves_at_the_next_report_once_a_circuit_opens() -> None:
    router = following_router()
    model = "openai/gpt-oss-120b"
    routable = router.registry.get_sample_value

    def reports() -> list[LoadReport]:
        load = ReplicaLoad(0, 0, 0.0, observed_at_s=router.clock.now())
        return [LoadReport("a", load, 0.0, 1000.0), LoadReport("b", load, 0.0, 1000.0)]

    router.apply_loads(reports())
    assert routable("orchestrator_router_routable_replicas", {"model": model}) == 2
    for _ in range(router.settings.breaker.failure_threshold):
        router.breakers.failed("b")
    router.apply_loads(reports())
    assert routable("orchestrator_router_routable_replicas", {"model": model}) == 1
