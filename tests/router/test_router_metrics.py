"""The router's `/metrics` tells an operator what happened: requests by code, decisions by pool
and generation, latencies, in flight, and each replica's estimated capacity, labelled only from
the fixed label set."""

from __future__ import annotations

import urllib.request

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from replica_server import ReplicaThread
from router_harness import MODEL, ReplicaEntry, RouterThread, running_router, wait_until

from orchestrator.core.slo import SloOutcome, SloTarget, SloTargets
from orchestrator.monitoring.router_slo import format_router_slo, router_slo
from orchestrator.router_service import RouterSettings

ALLOWED_LABELS = {
    "site", "pool", "generation", "replica", "code", "frontend", "profile", "kind", "model",
    "priority", "outcome", "key_id",
    "engine_version",  # only on orchestrator_router_replica_info, the info family
}  # fmt: skip
HISTOGRAM_LABELS = {"le"}


def families(router: RouterThread) -> dict[str, list]:
    with urllib.request.urlopen(f"{router.metrics_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        family.name: family.samples
        for family in text_string_to_metric_families(text)
        if family.name.startswith("orchestrator_router_")
    }


def test_router_metrics_cover_the_traffic_and_use_only_the_fixed_labels(
    pair_router: RouterThread,
) -> None:
    client = openai.OpenAI(base_url=f"{pair_router.url}/v1", api_key="unused", max_retries=0)
    for stream in (False, True, True):
        reply = client.completions.create(
            model=MODEL, prompt="Hi", max_tokens=8, stream=stream, extra_body={"ignore_eos": True}
        )
        if stream:
            list(reply)  # type: ignore[arg-type]
    assert wait_until(
        lambda: pair_router.metric("orchestrator_router_estimated_capacity_tokens_per_second") > 0,
        timeout_s=3.0,
    )

    found = families(pair_router)

    assert {
        "orchestrator_router_requests",
        "orchestrator_router_decisions",
        "orchestrator_router_time_to_first_token_seconds",
        "orchestrator_router_time_per_output_token_seconds",
        "orchestrator_router_request_duration_seconds",
        "orchestrator_router_in_flight_requests",
        "orchestrator_router_retries",
        "orchestrator_router_upstream_errors",
        "orchestrator_router_circuit_open",
        "orchestrator_router_estimated_capacity_tokens_per_second",
        "orchestrator_router_replica_info",
    } <= set(found)
    for name, samples in found.items():
        for sample in samples:
            assert set(sample.labels) <= ALLOWED_LABELS | HISTOGRAM_LABELS, (name, sample.labels)
    assert (
        pair_router.metric("orchestrator_router_requests_total", frontend="http", code="200") >= 3
    )
    assert pair_router.metric("orchestrator_router_time_to_first_token_seconds_count") >= 2
    assert pair_router.metric("orchestrator_router_time_per_output_token_seconds_count") >= 2
    for replica_id in ("mi355x-0", "mi300x-0"):
        capacity = pair_router.metric(
            "orchestrator_router_estimated_capacity_tokens_per_second", replica=replica_id
        )
        assert capacity > 0
    # every answered request has one SLO outcome for its class (which one depends on how fast
    # a shared machine ran the replicas: the outcome rules are tested on their own); the targets
    # are exported
    outcomes = {
        outcome: pair_router.metric(
            "orchestrator_router_slo_requests_total", priority="interactive", outcome=outcome
        )
        for outcome in SloOutcome
    }
    assert sum(outcomes.values()) == 3 and outcomes[SloOutcome.FAILED] == 0, outcomes
    target = "orchestrator_router_slo_target_seconds"
    assert pair_router.metric(target, model="*", priority="interactive", kind="ttft") == 3.0
    assert pair_router.metric(target, model="*", priority="batch", kind="tpot") == 0.08
    # `orchestrator status --router` reads the same page
    slo = router_slo(pair_router.metrics_url)
    assert slo.targets[("*", "interactive")] == {"ttft": 3.0, "tpot": 0.08}
    assert sum(p.answered for p in slo.pools) == 3
    met = sum(p.counts.get(SloOutcome.MET.value, 0.0) for p in slo.pools)
    assert met == outcomes[SloOutcome.MET]  # the status reads what the counter says
    shown = format_router_slo(slo)
    assert "interactive" in shown and "% of" in shown


def test_a_request_names_an_operator_class_and_is_judged_and_counted_against_its_targets(
    instant_pair: tuple[ReplicaThread, ReplicaThread],
) -> None:
    fast, slow = instant_pair
    classes = {"premium": SloTarget(0.5, 0.03), "bulk": SloTarget(60.0, 0.3)}
    entries = [
        ReplicaEntry("mi355x-0", fast.url, "MI355X"),
        ReplicaEntry("mi300x-0", slow.url, "MI300X"),
    ]
    settings = RouterSettings(slo=SloTargets(classes=classes))
    with running_router(entries, settings=settings) as router:
        client = openai.OpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0)
        client.completions.create(
            model=MODEL, prompt="Hi", max_tokens=4, extra_headers={"X-Priority": "premium"}
        )
        client.completions.create(
            model=MODEL, prompt="Hi", max_tokens=4, extra_body={"priority": "bulk"}
        )
        with pytest.raises(openai.BadRequestError) as unknown:
            client.completions.create(
                model=MODEL, prompt="Hi", max_tokens=4, extra_headers={"X-Priority": "gold"}
            )
        answered = "orchestrator_router_slo_requests_total"
        assert router.metric(answered, priority="premium") == 1
        assert router.metric(answered, priority="bulk") == 1
        assert router.metric(answered, priority="interactive") == 0
        target = "orchestrator_router_slo_target_seconds"
        assert router.metric(target, model="*", priority="premium", kind="tpot") == 0.03
    error = unknown.value.body
    assert isinstance(error, dict) and error["param"] == "x-priority"
    assert "`premium`" in error["message"] and "`bulk`" in error["message"]
