"""The replicas reserved for the tight class narrow where its requests go first, not where they
may go at all: a reserved replica that fails before a token hands the request to another."""

from __future__ import annotations

import asyncio
import json
import time

from aiohttp import web
from router_harness import MODEL, EchoReplica, tcp_site

from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, Replica, ReplicaState, Site
from orchestrator.core.slo import BATCH, INTERACTIVE, SloTarget, SloTargets
from orchestrator.router_service import RouterService, RouterSettings, profile_named
from orchestrator.routing.context import Priority, RequestContext
from orchestrator.table.snapshot import RoutingTable
from orchestrator.table.source import TableHolder


def _replica(replica_id: str, url: str, generation: Generation) -> Replica:
    return Replica(
        replica_id=replica_id, url=url, model=MODEL, pool=f"kr-{generation.value.lower()}",
        site="kr", generation=generation, engine=EngineKind.SIM,
        capacity_prior_tokens_per_s=1000.0 if generation is Generation.MI355X else 500.0,
        state=ReplicaState.READY,
    )  # fmt: skip


async def _served_by_another_when_the_reserved_one_fails() -> None:
    broken, working = EchoReplica(fail_status=503), EchoReplica()
    runners = [web.AppRunner(broken.app()), web.AppRunner(working.app())]
    urls = []
    for runner in runners:
        await runner.setup()
        site = tcp_site(runner)
        await site.start()
        host, port = runner.addresses[0][:2]
        urls.append(f"http://{host}:{port}")
    fast = _replica("fast", urls[0], Generation.MI355X)
    slow = _replica("slow", urls[1], Generation.MI300X)
    table = RoutingTable(version=1, replicas=(fast, slow), sites={"kr": Site("kr", {})})
    loose = SloTargets(classes={BATCH: SloTarget(ttft_s=3.0, tpot_s=0.2)})
    service = RouterService(
        TableHolder(table),
        profile_named("capacity"),
        settings=RouterSettings(slo=loose),
        scrape_replicas=False,
    )
    await service.upstream.start()
    try:
        slo = service.slo
        # tight work and loose work in flight: the fast replica is held for the tight target
        service.fleet.started(fast, slo.target(MODEL, INTERACTIVE).tpot_s)
        service.fleet.started(slow, slo.target(MODEL, BATCH).tpot_s)
        fast_stats = service.fleet.stats("fast")
        assert fast_stats is not None
        assert fast_stats.reserved_tpot_s == slo.target(MODEL, INTERACTIVE).tpot_s
        ctx = RequestContext(model=MODEL, prompt_tokens=10, priority=Priority.INTERACTIVE)
        body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 2}).encode()
        reply = await service.dispatcher.dispatch(
            ctx, "/v1/completions", body, deadline_s=time.monotonic() + 10.0
        )
        await reply.aclose()
        assert len(broken.received) == 1  # tried first: it is the reserved one
        assert reply.status == 200 and reply.replica.replica_id == "slow"
        assert reply.retries == 1
    finally:
        await service.upstream.close()
        for runner in runners:
            await runner.cleanup()


def test_a_tight_request_whose_reserved_replica_fails_is_served_by_another() -> None:
    asyncio.run(_served_by_another_when_the_reserved_one_fails())
