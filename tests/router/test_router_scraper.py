"""The router scrapes every replica about once a second: the engine's load and the capacity
estimate follow what the replica reports, and an unreadable page never stops the scraper or
takes a healthy replica out of rotation."""

from __future__ import annotations

import json
import urllib.request

from router_harness import MODEL, ReplicaEntry, echo_replica, running_router, wait_until


def post_completion(url: str) -> int:
    body = json.dumps({"model": MODEL, "prompt": "x"}).encode()
    request = urllib.request.Request(
        f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


BUSY_PAGE = (
    "vllm:num_requests_running 7\nvllm:num_requests_waiting 2\nvllm:kv_cache_usage_perc 0.5\n"
    "vllm:prompt_tokens_total 1000\nvllm:generation_tokens_total 5000\n"
)


def test_scrapes_bring_the_engines_load_into_the_fleet_state() -> None:
    with echo_replica() as (echo, server):
        echo.metrics_page = BUSY_PAGE
        with running_router([ReplicaEntry("busy", server.url, engine="vllm")]) as router:
            stats = router.service.fleet.stats("busy")
            assert stats is not None
            assert wait_until(lambda: stats.load is not None, 3.0)
            capacity = router.metric(
                "orchestrator_router_estimated_capacity_tokens_per_second", replica="busy"
            )

    assert stats.load is not None
    assert (stats.load.running, stats.load.waiting) == (7, 2)
    assert stats.load.kv_cache_usage == 0.5
    assert capacity == stats.capacity_tokens_per_s > 0


def test_an_unreadable_metrics_page_is_counted_and_the_replica_keeps_serving() -> None:
    with echo_replica() as (echo, server):
        echo.metrics_page = "this is { not an exposition page\n"
        with running_router([ReplicaEntry("odd", server.url, engine="external")]) as router:
            scraper = router.service.scraper
            assert wait_until(lambda: scraper.rounds >= 3, 5.0)
            errors = router.metric(
                "orchestrator_router_upstream_errors_total", replica="odd", kind="scrape"
            )
            client_status = post_completion(router.url)
            stats = router.service.fleet.stats("odd")

    assert errors >= 3
    assert client_status == 200
    assert stats is not None and stats.load is None and not stats.circuit_open
