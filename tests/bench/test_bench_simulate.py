"""`orchestrator simulate`: the real routing profiles over the fleet model, in virtual time."""

from __future__ import annotations

import json
import random

import pytest

from orchestrator.bench.fast_step_cost import PrecomputedStepCost
from orchestrator.bench.simulate.command import evaluate
from orchestrator.bench.simulate.fleet_spec import (
    Prior,
    build_profile,
    parse_fleet,
    replica_specs,
)
from orchestrator.bench.simulate.samples import UnitStream, offline_samples
from orchestrator.bench.simulate.scenarios import (
    ServerSettings,
    fleet_model_rate_per_s,
    probe_server,
    search_server,
)
from orchestrator.bench.virtual_fleet import Arrival, VirtualFleet
from orchestrator.cli import main
from orchestrator.core.errors import OrchestratorError
from orchestrator.core.generations import Generation
from orchestrator.fleet.step_cost import StepCostModel, StepWork

SMALL = parse_fleet("MI355X:2,MI300X:2")
SHORT = ServerSettings(warmup_s=60.0, duration_s=60.0, seed=5)


@pytest.mark.slow
def test_wrong_prior_small_fleet_offline_keeps_near_the_sum_of_its_pools() -> None:
    capacity, round_robin = evaluate(
        SMALL, "Offline", ["capacity", "round-robin"], Prior.EQUAL,
        sum_of_parts=True, minutes=4.0, warmup_s=0.0, seed=1,
    )  # fmt: skip
    print(f"\ncapacity {capacity.ratio:.3f}, round-robin {round_robin.ratio:.3f}")
    assert capacity.ratio >= 0.8  # a 4-minute run: start-up and drain weigh more than at scale
    assert round_robin.ratio < capacity.ratio - 0.2  # blind to speed: the MI300X sets the pace
    share = capacity.fleet.pool_shares["local-mi355x"]
    assert 0.7 < share < 0.9  # learnt from an all-equal prior (true capacity share ~0.82)


@pytest.mark.slow
def test_server_probes_pass_below_and_fail_above_one_rate() -> None:
    specs = replica_specs(SMALL, Prior.CALIBRATED)
    model = fleet_model_rate_per_s(specs)
    stream = UnitStream(SHORT.seed)
    probes = [probe_server(specs, "capacity", model * f, SHORT, stream) for f in (0.5, 1.0, 2.0)]
    verdicts = [p.passed for p in probes]
    assert verdicts == sorted(verdicts, reverse=True), verdicts  # passes, then fails
    assert verdicts[0] and not verdicts[-1]
    # Per-token latency grows with the rate; below capacity p99 TTFT is mostly one prefill (about
    # 0.3 s at 0.5x and at 1x alike, so their order is noise), and only the overloaded probe's
    # TTFT runs away.
    tpots = [p.tpot_p99_s for p in probes]
    assert tpots == sorted(tpots), tpots
    ttfts = [p.ttft_p99_s for p in probes]
    assert ttfts[-1] > 2 * max(ttfts[:-1]), ttfts


@pytest.mark.slow
def test_search_returns_a_passing_rate_whose_next_step_up_fails() -> None:
    specs = replica_specs(parse_fleet("MI355X:1,MI300X:1"), Prior.CALIBRATED)
    search = search_server(
        specs, "capacity", SHORT, start_rate_per_s=fleet_model_rate_per_s(specs), precision=0.05
    )
    assert search.best is not None and search.best.passed
    failing_above = [
        p for p in search.probes if not p.passed and p.rate_per_s > search.best.rate_per_s
    ]
    assert (
        failing_above and min(p.rate_per_s for p in failing_above) <= search.best.rate_per_s * 1.06
    )
    assert all(p.rate_per_s <= search.best.rate_per_s for p in search.probes if p.passed)


def test_server_streams_replay_the_same_requests_closer_together_at_a_higher_rate() -> None:
    slow = UnitStream(3).arrivals(2.0, 30.0)
    fast = UnitStream(3).arrivals(4.0, 15.0)
    assert len(slow) == len(fast) > 20
    for a, b in zip(slow, fast, strict=True):
        assert (a.prompt_tokens, a.output_tokens) == (b.prompt_tokens, b.output_tokens)
        assert b.at_s == pytest.approx(a.at_s / 2)
    assert UnitStream(4).arrivals(2.0, 30.0) != slow


def test_offline_samples_are_deterministic_and_longest_first() -> None:
    samples = offline_samples(500, seed=2)
    assert samples == offline_samples(500, seed=2)
    outputs = [s.output_tokens for s in samples]
    assert outputs == sorted(outputs, reverse=True)
    assert sum(outputs) / len(outputs) == pytest.approx(1278, rel=0.15)


def test_closed_loop_never_holds_more_than_its_window() -> None:
    specs = replica_specs(parse_fleet("MI300X:2"), Prior.CALIBRATED)
    fleet = VirtualFleet(specs, build_profile("least-requests"))
    peak = 0

    def watch(_now: float, running: VirtualFleet) -> None:
        nonlocal peak
        peak = max(peak, sum(e.batcher.num_running + e.batcher.num_waiting
                             for e in running.engines.values()))  # fmt: skip

    samples = [Arrival(0.0, 1000, 50) for _ in range(200)]
    run = fleet.run(samples, window=16, on_scrape=watch)
    assert run.finished == 200 and 0 < peak <= 16


def test_precomputed_step_cost_matches_the_fleet_model() -> None:
    rng = random.Random(0)
    for generation in (Generation.MI300X, Generation.MI355X):
        base = StepCostModel.for_generation(generation)
        fast = PrecomputedStepCost(base)
        for _ in range(200):
            work = StepWork(rng.randint(0, 1024), rng.random() * 5e6, rng.randint(0, 8192),
                            rng.random() * 1e4, rng.random() * 1e7)  # fmt: skip
            assert fast.step_time_s(work) == pytest.approx(base.step_time_s(work), rel=1e-12)
        for _ in range(200):
            sequences, context = rng.randint(0, 1024), rng.random() * 5e6
            decode_only = StepWork(sequences, context, 0, 0.0, 0.0)
            # the simulation's fast path gives exactly what the general one gives ...
            assert fast.decode_step_time_s(sequences, context) == fast.step_time_s(decode_only)
            # ... which is the fleet model's step time up to rounding
            assert fast.decode_step_time_s(sequences, context) == pytest.approx(
                base.step_time_s(decode_only), rel=1e-12
            )


def test_simulate_prints_a_table_with_each_profile(capsys: pytest.CaptureFixture[str]) -> None:
    code = main([
        "simulate", "--fleet", "MI355X:1,MI300X:1", "--scenario", "offline", "--minutes", "1",
        "--profile", "capacity", "--profile", "weighted-static:MI355X=4.5,MI300X=1", "--json",
    ])  # fmt: skip
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["profile"] for r in data["results"]] == [
        "capacity",
        "weighted-static:MI355X=4.5,MI300X=1",
    ]
    assert all(r["fleet"]["tokens_per_s"] > 0 for r in data["results"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--fleet", "MI355X"], "GENERATION:REPLICAS"),
        (["--fleet", "MI999X:4"], "MI999X"),
        (["--fleet", "MI355X:0"], ">= 1"),
        (["--fleet", "MI355X:2,MI355X:2"], "twice"),
        (["--profile", "fastest"], "unknown profile"),
        (["--profile", "weighted-static:MI355X=-1"], "weights > 0"),
        (["--prior", "optimistic"], "calibrated"),
        (["--scenario", "Burst"], "Offline or Server"),
    ],
)
def test_simulate_rejects_bad_arguments_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["simulate", "--scenario", "Server"] if "--scenario" not in argv else ["simulate"]
    with pytest.raises(SystemExit) as exit_info:
        main([*base, *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_profile_builder_rejects_plain_weighted_static_without_weights() -> None:
    with pytest.raises(OrchestratorError, match="weighted-static:GEN=WEIGHT"):
        build_profile("weighted-static")
