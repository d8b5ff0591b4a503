"""What a node's replicas served between two looks: scraped from their `/metrics` pages.

Token counters are cumulative; the meter keeps each replica's last totals and turns them into
growth (a restarted replica's counters start again from 0 and count as growth from there).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from orchestrator.core.records import EngineKind, ReplicaLoad
from orchestrator.engines import adapter_for
from orchestrator.fabric.model import NodeTraffic


@dataclass(frozen=True, slots=True)
class ReplicaEndpoint:
    replica_id: str
    url: str
    engine: EngineKind


class TrafficMeter:
    """Turns successive scrapes of a node's replicas into `NodeTraffic` increments."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}

    async def measure(
        self, session: aiohttp.ClientSession, replicas: Sequence[ReplicaEndpoint], now_s: float
    ) -> NodeTraffic:
        loads = await asyncio.gather(*(_scrape(session, r, now_s) for r in replicas))
        generated = prompt = 0.0
        running = 0
        usage: list[float] = []
        for replica, load in zip(replicas, loads, strict=True):
            if load is None:
                continue
            totals = (load.generation_tokens_total or 0.0, load.prompt_tokens_total or 0.0)
            last = self._last.get(replica.replica_id)
            self._last[replica.replica_id] = totals
            if last is not None:
                generated += _growth(last[0], totals[0])
                prompt += _growth(last[1], totals[1])
            running += load.running
            usage.append(load.kv_cache_usage)
        return NodeTraffic(generated, prompt, running, tuple(usage))


def _growth(before: float, now: float) -> float:
    return now - before if now >= before else now


async def _scrape(
    session: aiohttp.ClientSession, replica: ReplicaEndpoint, now_s: float
) -> ReplicaLoad | None:
    """The replica's load, or None when it does not answer (it is starting or stopping)."""
    with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
        async with session.get(f"{replica.url}/metrics") as response:
            response.raise_for_status()
            return adapter_for(replica.engine).parse_load(await response.text(), now_s)
    return None
