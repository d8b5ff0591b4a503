"""A whole answer asked for with `settle_later` keeps its books open until the caller settles
(the HTTP front end does so once the answer is written); asked for without, it comes back
settled, as every other caller expects."""

from __future__ import annotations

import asyncio
import json
import time

from aiohttp import web
from router_harness import MODEL, EchoReplica, tcp_site

from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, Replica, ReplicaState, Site
from orchestrator.router_service import RouterService, profile_named
from orchestrator.routing.context import RequestContext
from orchestrator.table.snapshot import RoutingTable
from orchestrator.table.source import TableHolder

BODY = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 2}).encode()


async def _books_of_one_request(settle_later: bool) -> list[tuple[int, int]]:
    """(requests in flight on the replica, its output tokens counted), after the reply came
    back and after it was settled."""
    runner = web.AppRunner(EchoReplica().app())
    await runner.setup()
    await tcp_site(runner).start()
    host, port = runner.addresses[0][:2]
    replica = Replica(
        replica_id="one", url=f"http://{host}:{port}", model=MODEL, pool="kr-mi355x", site="kr",
        generation=Generation.MI355X, engine=EngineKind.SIM, capacity_prior_tokens_per_s=1000.0,
        state=ReplicaState.READY,
    )  # fmt: skip
    table = RoutingTable(version=1, replicas=(replica,), sites={"kr": Site("kr", {})})
    service = RouterService(TableHolder(table), profile_named("capacity"), scrape_replicas=False)
    await service.upstream.start()

    def books() -> tuple[int, int]:
        stats = service.fleet.stats("one")
        assert stats is not None
        return stats.in_flight, stats.output_tokens_total

    try:
        ctx = RequestContext(model=MODEL, prompt_tokens=3)
        reply = await service.dispatch(
            ctx, "/v1/completions", BODY, deadline_s=time.monotonic() + 10.0,
            settle_later=settle_later,
        )  # fmt: skip
        seen = [books()]
        assert reply.status == 200 and reply.body is not None
        if settle_later:
            assert reply.settle is not None
            assert reply.settle() == 2  # the usage's completion tokens
        else:
            assert reply.settle is None and reply.output_tokens == 2
        seen.append(books())
        # the connection went back to the pool: a second request goes out on it and settles
        again = await service.dispatch(ctx, "/v1/completions", BODY,
                                       deadline_s=time.monotonic() + 10.0)  # fmt: skip
        assert again.status == 200
        seen.append(books())
        return seen
    finally:
        await service.upstream.close()
        await runner.cleanup()


def test_a_whole_answer_settled_later_is_counted_out_only_when_settled() -> None:
    assert asyncio.run(_books_of_one_request(settle_later=True)) == [(1, 0), (0, 2), (0, 4)]


def test_a_whole_answer_asked_for_plainly_comes_back_settled() -> None:
    assert asyncio.run(_books_of_one_request(settle_later=False)) == [(0, 2), (0, 2), (0, 4)]
