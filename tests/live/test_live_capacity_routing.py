"""Capacity-proportional routing, live: 2 MI355X + 2 MI300X simulated replicas (time-scaled
processes) behind the router at 80% of the fleet's capacity. The default profile gives each
MI355X its capacity share and keeps p99 TTFT within the (scaled) 3 s target; round-robin, in the
same setting, overloads the MI300X replicas."""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import aiohttp
import pytest
from live_fleet import LiveReplica, live_fleet, metric_sum

from orchestrator.core.generations import Generation
from orchestrator.fleet.step_cost import StepCostModel
from orchestrator.sim.batcher import SimBatcher
from orchestrator.sim.sequences import SimRequest
from orchestrator.sim.virtual import percentile, run_virtual

pytestmark = pytest.mark.slow

FLEET = (Generation.MI355X, Generation.MI355X, Generation.MI300X, Generation.MI300X)
PROMPT_TOKENS = 1000
OUTPUT_TOKENS = 64
TIME_SCALE = 4.0
LOAD = 0.8
DURATION_S = 60.0
WINDOW_START_S = 20.0
STREAM_SHARE = 0.2
DRAIN_S = 30.0  # after the load stops, how long requests still in the queue may take
TARGET_TTFT_S = 3.0 * TIME_SCALE


def mix_capacity_tokens_per_s(generation: Generation) -> float:
    """Highest Poisson rate of this request mix meeting p99 TTFT 3 s and TPOT 80 ms, in
    simulated tokens/s: the replica's true capacity for the test's traffic."""
    cost = StepCostModel.for_generation(generation)
    low, high = 0.0, 2000.0
    for _ in range(16):
        rate = (low + high) / 2
        gaps = random.Random(1)
        arrivals, now = [], 0.0
        while (now := now + gaps.expovariate(rate)) < 120.0:
            arrivals.append(SimRequest(PROMPT_TOKENS, OUTPUT_TOKENS, now))
        run = run_virtual(SimBatcher(cost), arrivals)
        meets = percentile(run.ttfts_s(), 99) <= 3.0 and percentile(run.tpots_s(), 99) <= 0.08
        low, high = (rate, high) if meets else (low, rate)
    return low * OUTPUT_TOKENS


async def offer_load(router: str, rate_per_s: float) -> list[float]:
    """Poisson load for DURATION_S; returns client-side TTFTs of the streamed requests after
    the warm-up window. Every request must succeed; one still without a first token DRAIN_S
    after the load stops is cancelled and counts as an infinite TTFT."""
    gaps = random.Random(7)
    body = {"prompt": [7] * PROMPT_TOKENS, "max_tokens": OUTPUT_TOKENS, "ignore_eos": True}
    ttfts: list[float] = []
    waiting: set[object] = set()  # counted streams still without a first token
    failures: list[str] = []
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=timeout
    ) as session:

        async def one(stream: bool, started_at: float) -> None:
            payload = {**body, "stream": stream}
            sent = time.monotonic()
            key = object()
            counted = stream and sent - started_at >= WINDOW_START_S
            if counted:
                waiting.add(key)
            async with session.post(f"{router}/v1/completions", json=payload) as response:
                if response.status != 200:
                    waiting.discard(key)
                    failures.append(f"{response.status}: {await response.text()}")
                    return
                if not stream:
                    await response.read()
                    return
                async for line in response.content:
                    if key in waiting and line.startswith(b"data: {"):
                        waiting.discard(key)
                        ttfts.append(time.monotonic() - sent)
                    if b'"error"' in line:
                        failures.append(line.decode())

        start = time.monotonic()
        tasks = []
        next_at = start
        while (now := time.monotonic()) - start < DURATION_S:
            if now >= next_at:
                tasks.append(asyncio.create_task(one(gaps.random() < STREAM_SHARE, start)))
                next_at += gaps.expovariate(rate_per_s)
            await asyncio.sleep(max(0.0, min(next_at - time.monotonic(), 0.01)))
        _, unfinished = await asyncio.wait(tasks, timeout=DRAIN_S)
        for task in unfinished:
            task.cancel()
        await asyncio.gather(*unfinished, return_exceptions=True)
    assert not failures, failures[:5]
    return ttfts + [float("inf")] * len(waiting)


def generated(replicas: list[LiveReplica]) -> dict[str, float]:
    return {r.replica_id: metric_sum(r.url, "vllm:generation_tokens_total") for r in replicas}


def run_profile(
    profile: str, workdir: Path
) -> tuple[dict[str, float], list[float], list[LiveReplica]]:
    capacities = {g: mix_capacity_tokens_per_s(g) for g in set(FLEET)}
    fleet_tokens_per_s = sum(capacities[g] for g in FLEET) / TIME_SCALE
    rate = LOAD * fleet_tokens_per_s / OUTPUT_TOKENS
    # The round-robin baseline shows what the profile does to the MI300X queues; with admission
    # control on, the router would refuse the excess instead (tests/admission).
    admission = ("--admission", "off") if profile == "round-robin" else ()
    with live_fleet(
        FLEET, workdir, time_scale=TIME_SCALE, profile=profile, router_args=admission
    ) as (router, replicas):

        async def measured() -> tuple[dict[str, float], dict[str, float], list[float]]:
            load = asyncio.create_task(offer_load(router, rate))
            await asyncio.sleep(WINDOW_START_S)
            before = await asyncio.to_thread(generated, replicas)
            await asyncio.sleep(DURATION_S - WINDOW_START_S)
            after = await asyncio.to_thread(generated, replicas)
            return before, after, await load

        before, after, ttfts = asyncio.run(measured())
    served = {rid: after[rid] - before[rid] for rid in after}
    total = sum(served.values())
    shares = {rid: tokens / total for rid, tokens in served.items()}
    per_gpu = {g.value: round(c) for g, c in capacities.items()}
    print(
        f"\n{profile}: capacities per GPU for this mix {json.dumps(per_gpu)}"
        f"; shares {json.dumps({k: round(v, 3) for k, v in shares.items()})}"
        f"; p99 TTFT {percentile(ttfts, 99):.2f}s (target {TARGET_TTFT_S:.0f}s, n={len(ttfts)})"
    )
    return shares, ttfts, replicas


def test_default_profile_gives_each_mi355x_its_capacity_share_within_the_ttft_target(
    tmp_path: Path,
) -> None:
    capacities = {g: mix_capacity_tokens_per_s(g) for g in set(FLEET)}
    proportional = capacities[Generation.MI355X] / sum(capacities[g] for g in FLEET)
    shares, ttfts, replicas = run_profile("capacity", tmp_path)
    for replica in replicas:
        if replica.generation is Generation.MI355X:
            assert shares[replica.replica_id] == pytest.approx(proportional, rel=0.15)
    assert percentile(ttfts, 99) <= TARGET_TTFT_S


def test_round_robin_overloads_the_mi300x_replicas(tmp_path: Path) -> None:
    _, ttfts, _ = run_profile("round-robin", tmp_path)
    assert percentile(ttfts, 99) > TARGET_TTFT_S
