"""A real Prometheus over the stack's real processes: it scrapes the router, the simulated engines
and the node exporters, evaluates every rule without error, and every query of every dashboard
panel and every recording rule returns data once some traffic has flowed."""

from __future__ import annotations

import json
import math
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
from assembled_stack import MODEL, TIME_SCALE, AssembledStack, assembled_stack
from dashboard_queries import panel_queries

from orchestrator.monitoring.local_prometheus import LocalPrometheus, prometheus_available
from orchestrator.monitoring.rules import all_rules, render_rules

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not prometheus_available(),
        reason="/usr/bin/prometheus is not installed (apt-get install prometheus)",
    ),
]
DATA_WITHIN_S = 40.0


def chat(router_url: str, max_tokens: int) -> int:
    body = json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Hello!"}],
            "max_tokens": max_tokens,
            "stream": True,
        }
    ).encode()
    request = urllib.request.Request(
        f"{router_url}/v1/chat/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()
        return int(response.status)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AssembledStack]:
    with assembled_stack(tmp_path_factory.mktemp("stack")) as running:
        yield running


class SteadyLoad:
    """Streamed chat requests through the router from two threads until `stop()`, so counters
    move between scrapes; every answer must be 200."""

    def __init__(self, router_url: str) -> None:
        self._router_url = router_url
        self._stopping = threading.Event()
        self.statuses: list[int] = []
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(2)]

    def _run(self, seed: int) -> None:
        count = 0
        while not self._stopping.is_set():
            self.statuses.append(chat(self._router_url, 4 + (seed + count) % 8))
            count += 1
            self._stopping.wait(0.2)

    def __enter__(self) -> SteadyLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=60)


@pytest.fixture(scope="module")
def prometheus(stack: AssembledStack) -> Iterator[LocalPrometheus]:
    rules = render_rules(max_for_s=1, latency_scale=TIME_SCALE)
    with (
        LocalPrometheus(stack.targets, rules=rules, scrape_interval_s=0.5) as server,
        SteadyLoad(stack.router_url) as load,
    ):
        yield server
    assert load.statuses and set(load.statuses) == {200}


def wait_for(condition, what: str, within_s: float = DATA_WITHIN_S):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within_s
    while True:
        result = condition()
        if result or time.monotonic() > deadline:
            assert result, f"{what} not within {within_s:g} s"
            return result
        time.sleep(0.5)


def test_prometheus_scrapes_the_router_every_engine_and_every_exporter(
    stack: AssembledStack, prometheus: LocalPrometheus
) -> None:
    def all_up() -> list[dict]:
        targets = prometheus.targets()
        return targets if all(t["health"] == "up" for t in targets) else []

    targets = wait_for(all_up, "every target up")
    jobs = sorted(t["labels"]["job"] for t in targets)
    assert jobs == sorted(t.job for t in stack.targets)
    assert jobs.count("engine") == len(stack.replicas) and jobs.count("router") == 1
    for replica in stack.replicas:
        series = prometheus.query(f'vllm:num_requests_running{{replica="{replica.replica_id}"}}')
        assert [s["metric"]["pool"] for s in series] == [replica.pool]
        assert series[0]["metric"]["generation"] == replica.generation.value
    for exporter in (t for t in stack.targets if t.job == "exporter"):
        node = exporter.labels["node"]
        series = prometheus.query(f'rdma_port_state{{node="{node}"}}')
        assert series, f"no RDMA port series from {node}"
        assert {s["metric"]["site"] for s in series} == {exporter.labels["site"]}
        assert all("exported_node" not in s["metric"] for s in series)


def test_the_router_reports_every_replica_routable(
    stack: AssembledStack, prometheus: LocalPrometheus
) -> None:
    def routable() -> list[dict]:
        return prometheus.query(f'orchestrator_router_routable_replicas{{model="{MODEL}"}}')

    series = wait_for(routable, "the routable-replica gauge")
    assert float(series[0]["value"][1]) == len(stack.replicas)


def test_every_rule_evaluates_without_error(prometheus: LocalPrometheus) -> None:
    def evaluated() -> list[dict]:
        rules = [rule for group in prometheus.rule_groups() for rule in group["rules"]]
        return (
            rules if all(rule.get("lastEvaluation", "").startswith("2") for rule in rules) else []
        )

    rules = wait_for(evaluated, "every rule evaluated")
    assert len(rules) == len(all_rules())
    errors = [
        f"{rule['name']}: {rule.get('lastError')}" for rule in rules if rule["health"] != "ok"
    ]
    assert errors == []


def test_every_recording_rule_returns_a_series(prometheus: LocalPrometheus) -> None:
    missing = pending_queries(prometheus, [r.name for r in all_rules() if not r.is_alert])
    assert missing == [], "recording rules without data"


def test_every_dashboard_panel_query_returns_a_series(prometheus: LocalPrometheus) -> None:
    queries = {str(query): query.expr for query in panel_queries()}
    missing = pending_queries(prometheus, list(queries), lambda label: queries[label])
    assert missing == [], "dashboard queries without data"


def pending_queries(prometheus, labels, expr_of=lambda label: label):  # type: ignore[no-untyped-def]
    """The labels whose query still has no series with a number (NaN is not one) after
    `DATA_WITHIN_S`; all polled together."""
    pending = list(labels)
    deadline = time.monotonic() + DATA_WITHIN_S
    while pending and time.monotonic() < deadline:
        pending = [label for label in pending if not has_a_number(prometheus.query(expr_of(label)))]
        if pending:
            time.sleep(1.0)
    return pending


def has_a_number(series: list[dict]) -> bool:
    return any(not math.isnan(float(s["value"][1])) for s in series)
