"""A rolling upgrade makes one pool's engines 38% faster mid-run (virtual time, the router's own
profile and estimator, nobody told): the learned capacity follows, the pool's share of traffic
rises to what a router told the new speed gives it, the control plane's step detector and the
capacity-change alert (promtool, on the series the run produced) both see the step on that pool
alone, and goodput ends within 5% of the told router's."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from test_monitoring_rules import PROMTOOL, promtool

from orchestrator.bench.virtual_fleet import Arrival, FleetRun, ReplicaSpec, VirtualFleet
from orchestrator.controlplane.capacity_history import CapacityHistory, CapacitySample
from orchestrator.core.generations import Generation
from orchestrator.fleet.figures import capacity_prior_tokens_per_s, load_figures
from orchestrator.fleet.workload import WorkloadSampler
from orchestrator.monitoring.rules import rules_text
from orchestrator.routing.profiles import builtin_profiles

SPEEDUP = 1.38  # what one MLPerf round's software gave the same MI355X on GPT-OSS-120B
UPGRADE_S = 180.0
FOLLOWED_BY_S = UPGRADE_S + 120.0  # "within two simulated minutes"
END_S = UPGRADE_S + 240.0
FLEET = (("a0", Generation.MI355X), ("a1", Generation.MI355X),
         ("b0", Generation.MI300X), ("b1", Generation.MI300X))  # fmt: skip
UPGRADED, OTHER = "local-mi355x", "local-mi300x"
TTFT_S, TPOT_S = 3.0, 0.080

pytestmark = pytest.mark.skipif(
    not Path(PROMTOOL).is_file(), reason="promtool is not installed (apt-get install prometheus)"
)


def capacity(generation: Generation) -> float:
    return capacity_prior_tokens_per_s(load_figures(), generation)


OLD_TOKENS_PER_S = sum(capacity(g) for _, g in FLEET)
NEW_TOKENS_PER_S = OLD_TOKENS_PER_S + (SPEEDUP - 1.0) * 2 * capacity(Generation.MI355X)


def arrivals(*, upgraded_from_start: bool, seed: int = 1) -> Iterator[Arrival]:
    """80% of the old fleet's capacity until the upgrade, then 85% of the new one's: demand the
    old speed could not serve in the old proportions."""
    sampler, gaps = WorkloadSampler(seed=seed), random.Random(seed + 100)
    mean_output = load_figures().workload.mean_output_tokens
    now = 0.0
    while True:
        before = now < UPGRADE_S and not upgraded_from_start
        rate = (0.80 * OLD_TOKENS_PER_S if before else 0.85 * NEW_TOKENS_PER_S) / mean_output
        now += gaps.expovariate(rate)
        if now > END_S:
            return
        drawn = sampler.draw()
        yield Arrival(now, drawn.input_tokens, drawn.output_tokens)


def run_learning() -> FleetRun:
    """Priors at the old speed; the upgrade lands at `UPGRADE_S` and nobody tells the router."""
    fleet = VirtualFleet(
        [ReplicaSpec(rid, g, capacity(g)) for rid, g in FLEET], builtin_profiles()["capacity"]
    )

    def on_scrape(now: float, running: VirtualFleet) -> None:
        if now == UPGRADE_S:
            running.speed_up(UPGRADED, SPEEDUP)

    return fleet.run(arrivals(upgraded_from_start=False), until_s=END_S, on_scrape=on_scrape)


def run_told() -> FleetRun:
    """The reference: upgraded from the start, with priors that say so, under the new demand."""
    told = {Generation.MI355X: SPEEDUP, Generation.MI300X: 1.0}
    fleet = VirtualFleet(
        [ReplicaSpec(rid, g, capacity(g) * told[g]) for rid, g in FLEET],
        builtin_profiles()["capacity"],
    )
    fleet.speed_up(UPGRADED, SPEEDUP)
    return fleet.run(arrivals(upgraded_from_start=True), until_s=END_S)


def pool_capacity_of(run: FleetRun, replica_id: str, at_s: float) -> float:
    (sample,) = [s for s in run.capacity if s.at_s == at_s]
    return sample.capacity_tokens_per_s[replica_id]


def pool_capacity(run: FleetRun, pool: str, at_s: float) -> float:
    (sample,) = [s for s in run.capacity if s.at_s == at_s]
    return sum(v for rid, v in sample.capacity_tokens_per_s.items() if run.pool_of[rid] == pool)


def share(run: FleetRun, pool: str, from_s: float, to_s: float = END_S) -> float:
    """The pool's share of the requests that arrived in [from_s, to_s)."""
    counts = {
        rid: sum(1 for request in requests if from_s <= request.arrival_s < to_s)
        for rid, requests in run.requests.items()
    }
    return sum(n for rid, n in counts.items() if run.pool_of[rid] == pool) / sum(counts.values())


def goodput_tokens(run: FleetRun, from_s: float) -> int:
    """Output tokens of finished requests, arrived from `from_s`, that met both targets."""
    met = 0
    for requests in run.requests.values():
        for r in requests:
            if r.arrival_s < from_s or r.finish_s is None or r.first_token_s is None:
                continue
            tpot = (r.finish_s - r.first_token_s) / max(1, r.output_tokens - 1)
            if r.first_token_s - r.arrival_s <= TTFT_S and tpot <= TPOT_S:
                met += r.output_tokens
    return met


def promtool_case(run: FleetRun) -> tuple[dict[str, object], dict[str, str]]:
    """The run's capacity series at one-minute scrapes from the upgrade on, after ten minutes at
    the level the run had reached by the upgrade (a fleet steady before its rollout); and the
    alert each pool should raise two minutes after the upgrade."""
    minutes = [UPGRADE_S + 60.0 * i for i in range(int((END_S - UPGRADE_S) // 60) + 1)]
    series, values = [], {}
    for rid, generation in FLEET:
        pool = run.pool_of[rid]
        trail = [round(pool_capacity_of(run, rid, at)) for at in minutes]
        values[rid] = [trail[0]] * 10 + trail
        labels = (
            f'job="router",site="local",generation="{generation.value}",pool="{pool}",'
            f'replica="{rid}"'
        )
        series.append(
            {
                "series": f"orchestrator_router_estimated_capacity_tokens_per_second{{{labels}}}",
                "values": " ".join(str(v) for v in values[rid]),
            }
        )
    at = 12  # minutes into the series: two after the upgrade
    moved = abs((values["a0"][at] + values["a1"][at]) / (values["a0"][0] + values["a1"][0]) - 1)
    expected = {
        "severity": "warning", "site": "local", "generation": "MI355X", "pool": UPGRADED,
        "summary": f"learned capacity of {UPGRADED} moved {moved * 100:.4g}% in 10 minutes at an"
        " unchanged size",
    }  # fmt: skip
    case: dict[str, object] = {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": "9m", "alertname": "PoolCapacityStepChange", "exp_alerts": []},
            {
                "eval_time": f"{at}m",
                "alertname": "PoolCapacityStepChange",
                "exp_alerts": [
                    {
                        "exp_labels": {k: v for k, v in expected.items() if k != "summary"},
                        "exp_annotations": {"summary": expected["summary"]},
                    }
                ],
            },
        ],
    }
    return case, expected


def test_a_pool_made_38_percent_faster_is_followed_routed_to_alerted_on_and_served(
    tmp_path: Path,
) -> None:
    learning, told = run_learning(), run_told()

    # The learned capacity follows within two minutes, and settles near the new speed.
    before = pool_capacity(learning, UPGRADED, UPGRADE_S)
    assert pool_capacity(learning, UPGRADED, FOLLOWED_BY_S) >= 1.3 * before
    true_new = SPEEDUP * 2 * capacity(Generation.MI355X)
    assert pool_capacity(learning, UPGRADED, END_S) == pytest.approx(true_new, rel=0.25)
    other = pool_capacity(learning, OTHER, UPGRADE_S)
    assert pool_capacity(learning, OTHER, END_S) == pytest.approx(other, rel=0.15)

    # Its share of the traffic rises as its capacity did, to what the told router gives it.
    fast, slow = true_new, 2 * capacity(Generation.MI300X)
    rise = fast / (fast + slow) - 2 * capacity(Generation.MI355X) / OLD_TOKENS_PER_S
    after = share(learning, UPGRADED, FOLLOWED_BY_S)
    assert after - share(learning, UPGRADED, 60.0, UPGRADE_S) >= 0.5 * rise
    assert after == pytest.approx(share(told, UPGRADED, FOLLOWED_BY_S), abs=0.02)

    # Goodput once it has followed: at least 95% of what the told router gets.
    assert goodput_tokens(learning, FOLLOWED_BY_S) >= 0.95 * goodput_tokens(told, FOLLOWED_BY_S)

    # The control plane's detector, fed the run's pool sums every 5 s once the fleet is warm,
    # finds one step up on the upgraded pool and none on the other.
    history = CapacityHistory()
    for sample in learning.capacity:
        if sample.at_s >= UPGRADE_S - 60.0 and sample.at_s % 5 == 0:
            for pool in (UPGRADED, OTHER):
                total = pool_capacity(learning, pool, sample.at_s)
                history.record(pool, CapacitySample(sample.at_s, 2, total))
    found = history.pools()
    assert found[UPGRADED].step_changes_total >= 1 and found[OTHER].step_changes_total == 0
    step = found[UPGRADED].last_step
    assert step is not None and step.ratio > 1.15 and step.at_s <= FOLLOWED_BY_S

    # And the alert fires on the upgraded pool alone.
    case, _ = promtool_case(learning)
    (tmp_path / "rules.yaml").write_text(rules_text())
    document = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
                "group_eval_order": [g["name"] for g in yaml.safe_load(rules_text())["groups"]],
                "tests": [case]}  # fmt: skip
    (tmp_path / "upgrade.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    result = promtool("test", "rules", "upgrade.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
