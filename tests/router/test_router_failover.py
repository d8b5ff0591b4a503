"""A replica killed under steady load costs no request: those that had not streamed a token yet
complete on the other replica, and the streams it was serving continue there (migrated, as text
completions with the extended prompt). Nothing outlives its deadline, and once its circuit opens
the dead replica gets no more traffic."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import pytest
from router_harness import (
    MODEL,
    ReplicaEntry,
    running_router,
    sim_processes,
    wait_until,
)

from orchestrator.forwarding.breaker import BreakerState
from orchestrator.router_service import RouterSettings

TIME_SCALE = 20.0  # the replicas run 20x slower than an MI355X: a request takes seconds
DEADLINE_S = 15.0
CLIENTS = 16
KILL_AT_S = 3.0
LOAD_FOR_S = 9.0
OUTPUT_TOKENS = 60


@dataclass
class Outcome:
    started_s: float
    ended_s: float
    stream: bool
    status: int
    replica: str
    tokens: int = 0  # content events received (stream) or completion tokens (whole)
    error_event: bool = False
    done: bool = False


async def one_request(session: aiohttp.ClientSession, url: str, stream: bool, t0: float) -> Outcome:
    body = {
        "model": MODEL,
        "prompt": "Keep talking.",
        "max_tokens": OUTPUT_TOKENS,
        "ignore_eos": True,
        "stream": stream,
    }
    started = time.monotonic() - t0
    async with session.post(f"{url}/v1/completions", json=body) as response:
        data = await response.read()
        outcome = Outcome(
            started, time.monotonic() - t0, stream, response.status,
            response.headers.get("x-orchestrator-replica", ""),
        )  # fmt: skip
    if response.status != 200:
        return outcome
    if not stream:
        outcome.tokens = json.loads(data)["usage"]["completion_tokens"]
        return outcome
    events = [event.removeprefix(b"data: ") for event in data.split(b"\n\n") if event]
    outcome.done = events[-1] == b"[DONE]"
    outcome.error_event = any(event.startswith(b'{"error"') for event in events)
    outcome.tokens = sum(1 for event in events if b'"text":" ' in event)
    return outcome


async def steady_load(url: str, on_kill: Callable[[], None]) -> list[Outcome]:
    """`CLIENTS` clients send requests back to back, alternating whole and streamed, for
    `LOAD_FOR_S` seconds; `on_kill` runs (in a thread) `KILL_AT_S` seconds in."""
    outcomes: list[Outcome] = []
    t0 = time.monotonic()

    async def client(index: int) -> None:
        stream = (index // 2) % 2 == 0  # the router alternates replicas: mix kinds on each
        while time.monotonic() - t0 < LOAD_FOR_S:
            outcomes.append(await one_request(session, url, stream, t0))
            stream = not stream

    async def killer() -> None:
        await asyncio.sleep(KILL_AT_S)
        await asyncio.to_thread(on_kill)

    timeout = aiohttp.ClientTimeout(total=DEADLINE_S + 10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(killer(), *(client(i) for i in range(CLIENTS)))
    return outcomes


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_killing_a_replica_under_load_costs_only_the_streams_it_had_started() -> None:
    settings = RouterSettings(latency_scale=TIME_SCALE, request_deadline_s=DEADLINE_S / TIME_SCALE)
    with sim_processes(2, time_scale=TIME_SCALE) as (doomed, survivor):
        entries = [
            ReplicaEntry("doomed", doomed.url, "MI355X", time_scale=TIME_SCALE),
            ReplicaEntry("survivor", survivor.url, "MI355X", time_scale=TIME_SCALE),
        ]
        with running_router(entries, settings=settings) as router:
            watch: dict[str, float] = {}

            def kill_and_watch() -> None:
                doomed.kill()
                watch["killed_s"] = time.monotonic()
                breakers = router.service.breakers
                assert wait_until(lambda: breakers.state("doomed") is BreakerState.OPEN, 5.0)
                watch["opened_after_s"] = time.monotonic() - watch["killed_s"]
                stats = router.service.fleet.stats("doomed")
                assert stats is not None
                watch["started_when_open"] = stats.started_total

            t0 = time.monotonic()
            outcomes = asyncio.run(steady_load(router.url, kill_and_watch))
            killed_at = watch["killed_s"] - t0
            stats = router.service.fleet.stats("doomed")
            survivor_stats = router.service.fleet.stats("survivor")
            retries = router.metric("orchestrator_router_retries_total")
            errors = router.metric("orchestrator_router_upstream_errors_total", replica="doomed")
            migrated = router.metric(
                "orchestrator_router_migrations_total", reason="disconnect", outcome="continued"
            )

    assert stats is not None and survivor_stats is not None
    whole = [o for o in outcomes if not o.stream]
    streams = [o for o in outcomes if o.stream]
    cut = [o for o in streams if o.error_event]
    print(
        f"\n{len(outcomes)} requests ({len(whole)} whole, {len(streams)} streamed); "
        f"{len(cut)} streams cut; {migrated:.0f} migrated; {retries:.0f} retries; "
        f"{errors:.0f} upstream errors; "
        f"circuit open {watch['opened_after_s']:.2f} s after the kill; "
        f"longest request {max(o.ended_s - o.started_s for o in outcomes):.2f} s"
    )

    # No request outlives its deadline.
    assert all(o.ended_s - o.started_s < DEADLINE_S + 0.5 for o in outcomes)
    # Every request that had not streamed a token completed, on another replica if need be.
    assert all(o.status == 200 for o in outcomes)
    assert all(o.tokens == OUTPUT_TOKENS for o in whole)
    whole_on_doomed_after_kill = [
        o for o in whole if o.replica == "doomed" and o.ended_s > killed_at + 0.2
    ]
    assert whole_on_doomed_after_kill == []
    assert retries >= 1
    # Streams that had started on the dead replica went on elsewhere: none was cut.
    assert migrated >= 1, "the kill should have interrupted some streams"
    assert cut == []
    assert all(o.done and o.tokens == OUTPUT_TOKENS for o in streams)
    # Once the circuit opened, the dead replica got no more traffic.
    assert watch["opened_after_s"] < 4.0  # three failed health checks at the latest
    assert stats.started_total == watch["started_when_open"]
    opened_at = killed_at + watch["opened_after_s"]
    assert all(o.replica == "survivor" for o in outcomes if o.started_s > opened_at)
    # The books balance on both replicas.
    for replica_stats in (stats, survivor_stats):
        assert replica_stats.in_flight == 0
        assert replica_stats.started_total == replica_stats.finished_total
