"""Assemble one simulated replica (capacity model, batcher, live engine, web app) and serve it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import web

from orchestrator.core.generations import Generation, spec_of
from orchestrator.fleet.step_cost import StepCostModel
from orchestrator.sim.batcher import SimBatcher
from orchestrator.sim.live import LiveEngine
from orchestrator.sim.server import ServerInfo, create_app

log = logging.getLogger(__name__)

DEFAULT_MODEL = "openai/gpt-oss-120b"


@dataclass(frozen=True, slots=True)
class ReplicaSettings:
    """Everything that makes one simulated replica; `time_scale` 0 means zero latency."""

    generation: Generation
    model_name: str = DEFAULT_MODEL
    time_scale: float = 1.0
    seed: int = 0
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None


def build_app(settings: ReplicaSettings) -> web.Application:
    cost = StepCostModel.for_generation(settings.generation)
    batcher = SimBatcher(
        cost,
        max_num_seqs=settings.max_num_seqs,
        max_num_batched_tokens=settings.max_num_batched_tokens,
    )
    engine = LiveEngine(batcher, model_name=settings.model_name, time_scale=settings.time_scale)
    info = ServerInfo(
        model_name=settings.model_name,
        generation=spec_of(settings.generation).generation.value,
        max_model_len=cost.figures.model.max_context_tokens,
        time_scale=settings.time_scale,
        seed=settings.seed,
    )
    return create_app(engine, info)


@contextlib.asynccontextmanager
async def running_replica(
    settings: ReplicaSettings, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Serve a replica inside the current event loop; yields its base URL (port 0 picks one)."""
    runner = web.AppRunner(build_app(settings), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        await runner.cleanup()


def serve_forever(settings: ReplicaSettings, host: str, port: int) -> None:
    """Serve until SIGINT or SIGTERM, then shut down cleanly."""
    app = build_app(settings)
    log.info(
        "serving a simulated %s replica of %s on http://%s:%d (time scale %g)",
        settings.generation.value, settings.model_name, host, port, settings.time_scale,
    )  # fmt: skip
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    web.run_app(app, host=host, port=port, handler_cancellation=True, access_log=None, print=None)
