"""The lookup of a stored response no router remembers, over the real passthrough to replicas on
loopback: it asks only the replicas that could hold it, once per id however many ask, remembers
misses for a while, refuses beyond its cap, and says UNAVAILABLE (not NOT_FOUND) when a replica
that may be the holder did not answer."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator

from aiohttp import web
from prometheus_client import CollectorRegistry

from orchestrator.core.clock import MonotonicClock
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, Replica, ReplicaState
from orchestrator.forwarding.metrics import RouterMetrics
from orchestrator.forwarding.passthrough import Passthrough
from orchestrator.forwarding.stored_responses import StoredResponses
from orchestrator.forwarding.upstream import UpstreamPool
from orchestrator.table.snapshot import RoutingTable

HELD = "resp_held"


@dataclasses.dataclass
class Replicas:
    """Stored-response endpoints on loopback; each says 404 but for the ids it holds."""

    hits: Counter[str] = dataclasses.field(default_factory=Counter)
    holds: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    status: dict[str, int] = dataclasses.field(default_factory=dict)  # a forced answer
    delay_s: float = 0.0
    runners: list[web.AppRunner] = dataclasses.field(default_factory=list)

    async def start(self, name: str) -> str:
        async def get(request: web.Request) -> web.Response:
            self.hits[name] += 1
            await asyncio.sleep(self.delay_s)
            held = request.match_info["id"] in self.holds.get(name, set())
            status = self.status.get(name, 200 if held else 404)
            return web.json_response({"id": request.match_info["id"]}, status=status)

        app = web.Application()
        app.router.add_get("/v1/responses/{id}", get)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"


def replica_at(name: str, url: str, model: str = "m", **changes: object) -> Replica:
    replica = Replica(name, url, model, "pool", "site", Generation.MI300X, EngineKind.SIM, 1.0)
    return dataclasses.replace(replica, **changes)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def served() -> AsyncIterator[tuple[Replicas, UpstreamPool]]:
    replicas, pool = Replicas(), UpstreamPool()
    await pool.start()
    try:
        yield replicas, pool
    finally:
        await pool.close()
        for runner in replicas.runners:
            await runner.cleanup()


def lookup_over(pool: UpstreamPool, replicas: list[Replica], **kwargs: int) -> StoredResponses:
    clock = MonotonicClock()
    passthrough = Passthrough(pool, RouterMetrics(CollectorRegistry()), clock, connect_timeout_s=1)
    table = RoutingTable(1, tuple(replicas))
    return StoredResponses(lambda: table, passthrough, clock.now, **kwargs)


async def code_of(stored: StoredResponses, response_id: str, model: str | None = None) -> str:
    try:
        found = await stored.holder(response_id, model=model)
    except OrchestratorError as error:
        return error.code.value
    return found.replica_id


def test_only_ready_replicas_of_the_model_are_asked_once_per_id() -> None:
    async def scenario() -> None:
        async with served() as (replicas, pool):
            table = [replica_at(f"m-{i}", await replicas.start(f"m-{i}")) for i in range(3)]
            table += [
                replica_at(f"o-{i}", await replicas.start(f"o-{i}"), model="o") for i in range(3)
            ]
            replicas.holds["m-2"] = {HELD}
            stored = lookup_over(pool, table)
            codes = await asyncio.gather(*(code_of(stored, "resp_gone", "m") for _ in range(20)))
            assert set(codes) == {ErrorCode.NOT_FOUND.value}
            assert replicas.hits == Counter({"m-0": 1, "m-1": 1, "m-2": 1})  # coalesced
            assert await code_of(stored, "resp_gone", "m") == ErrorCode.NOT_FOUND.value
            assert sum(replicas.hits.values()) == 3  # the miss is remembered for a while
            assert await code_of(stored, HELD, "m") == "m-2"
            assert await code_of(stored, HELD) == "m-2"  # then known: nothing asked again
            assert sum(replicas.hits.values()) == 6

    asyncio.run(scenario())


def test_lookups_beyond_the_cap_are_refused_not_fanned_out() -> None:
    async def scenario() -> None:
        async with served() as (replicas, pool):
            table = [replica_at(f"m-{i}", await replicas.start(f"m-{i}")) for i in range(2)]
            replicas.delay_s = 0.3
            stored = lookup_over(pool, table, max_lookups=2)
            codes = await asyncio.gather(*(code_of(stored, f"resp_{i}") for i in range(4)))
            assert sorted(codes) == sorted(
                [ErrorCode.NOT_FOUND.value] * 2 + [ErrorCode.RESOURCE_EXHAUSTED.value] * 2
            )
            assert sum(replicas.hits.values()) == 4

    asyncio.run(scenario())


def test_a_holder_that_does_not_answer_is_unavailable_not_not_found() -> None:
    async def scenario() -> None:
        async with served() as (replicas, pool):
            table = [replica_at(f"m-{i}", await replicas.start(f"m-{i}")) for i in range(2)]
            await replicas.runners.pop().cleanup()  # m-1's port now refuses connections
            stored = lookup_over(pool, table)
            assert await code_of(stored, HELD) == ErrorCode.UNAVAILABLE.value
            assert await code_of(stored, HELD) == ErrorCode.UNAVAILABLE.value  # not remembered
            assert replicas.hits["m-0"] == 2
            unhealthy = replica_at("m-1", table[1].url, state=ReplicaState.UNHEALTHY)
            assert await code_of(lookup_over(pool, [table[0], unhealthy]), HELD) == "unavailable"
            assert replicas.hits["m-0"] == 3
            replicas.status["m-0"] = 500
            assert await code_of(lookup_over(pool, [table[0]]), HELD) == "unavailable"

    asyncio.run(scenario())
