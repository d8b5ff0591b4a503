"""What one external check costs the control plane: `/health`, then `/metrics` (a vLLM-sized page)
read and parsed, through the checker's HTTP client (the router's, `forwarding/upstream.py`) and
through aiohttp's (what the checkers used before), side by side in one run.

    python -m orchestrator.bench.checker_cost [--replicas 64] [--rounds 30] [--repeat 5]

`--replicas` instant engines in one process (`static_backend --count N --vllm-page`, as
`fleet_scale`'s) are checked all at once, `--rounds` times per measurement, as one checker
(`ExternalCheckerActor`, at most 64 endpoints) checks its share each second; the two clients
take turns, `--repeat` times each. The figures are this process's CPU (user + system) per
check, the engines' not included, and the wall time of a round; medians, with the spread
[max - min]. Registry calls are not made: they are the same either way.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

import aiohttp
import uvloop

from orchestrator.bench.watched_fleet import engines
from orchestrator.controlplane.external_pools import probe
from orchestrator.controlplane.metrics_page import read_page
from orchestrator.core.arg_types import positive_int
from orchestrator.engines import EngineAdapter, adapter_for
from orchestrator.forwarding.upstream import UpstreamPool

CLIENTS = ("router client", "aiohttp")


@dataclass(frozen=True, slots=True)
class CheckCost:
    client: str
    cpu_us_per_check: list[float]
    wall_ms_per_round: list[float]


async def _aiohttp_probe(session: aiohttp.ClientSession, url: str, adapter: EngineAdapter) -> None:
    """The checkers' check before this bench's change: aiohttp, the page read capped."""
    async with session.get(url + adapter.health_path) as health:
        health.raise_for_status()
    async with session.get(url + "/metrics") as metrics:
        metrics.raise_for_status()
        adapter.parse_load(await read_page(metrics), time.time())


async def _rounds(
    check: Callable[[str], Awaitable[object]], urls: Sequence[str], rounds: int
) -> tuple[float, float]:
    """(CPU µs per check, wall ms per round) over `rounds` rounds of every url at once, after
    one untimed round (connections opened)."""
    await asyncio.gather(*(check(url) for url in urls))
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(rounds):
        await asyncio.gather(*(check(url) for url in urls))
    cpu_us = (time.process_time() - cpu) / (rounds * len(urls)) * 1e6
    return cpu_us, (time.perf_counter() - wall) / rounds * 1e3


async def _measure(client: str, urls: Sequence[str], rounds: int) -> tuple[float, float]:
    adapter = adapter_for("external")
    if client == "aiohttp":
        timeout = aiohttp.ClientTimeout(total=2.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            return await _rounds(lambda url: _aiohttp_probe(session, url, adapter), urls, rounds)
    pool = UpstreamPool()
    await pool.start()

    async def check(url: str) -> None:
        load, problem, _ = await probe(pool, url, adapter)
        if load is None:  # a bench of a failing check would measure the wrong thing
            raise RuntimeError(f"{url}: {problem}")

    try:
        return await _rounds(check, urls, rounds)
    finally:
        await pool.close()


def run(replicas: int, rounds: int, repeat: int) -> list[CheckCost]:
    results = {client: CheckCost(client, [], []) for client in CLIENTS}
    with (
        TemporaryDirectory(prefix="checker-cost-") as folder,
        engines(replicas, Path(folder)) as urls,
    ):
        for index in range(repeat):
            for client in CLIENTS if index % 2 == 0 else reversed(CLIENTS):
                cpu_us, wall_ms = uvloop.run(_measure(client, urls, rounds))
                results[client].cpu_us_per_check.append(cpu_us)
                results[client].wall_ms_per_round.append(wall_ms)
    return [results[client] for client in CLIENTS]


def format_costs(costs: Sequence[CheckCost], replicas: int) -> str:
    def spread(values: Sequence[float]) -> str:
        return f"{statistics.median(values):8.0f} [{max(values) - min(values):.0f}]"

    lines = [
        f"One external check (/health, then /metrics read and parsed), {replicas} replicas a"
        " round; medians [max - min]:",
        f"{'client':<16}{'CPU µs/check':>18}{'wall ms/round':>18}",
    ]
    for cost in costs:
        lines.append(
            f"{cost.client:<16}{spread(cost.cpu_us_per_check):>18}{spread(cost.wall_ms_per_round):>18}"
        )
    ours, theirs = (statistics.median(c.cpu_us_per_check) for c in costs)
    lines.append(f"router client / aiohttp, CPU per check: {ours / theirs:.2f}x")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orchestrator.bench.checker_cost",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("--replicas", type=positive_int, default=64, help="endpoints a round")
    parser.add_argument("--rounds", type=positive_int, default=30, help="rounds a measurement")
    parser.add_argument("--repeat", type=positive_int, default=5, help="measurements a client")
    args = parser.parse_args(argv)
    print(format_costs(run(args.replicas, args.rounds, args.repeat), args.replicas))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
