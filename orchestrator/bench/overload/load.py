"""The overload benchmark's client: open-loop Poisson load of streamed completions, and one run
of it against a fresh router."""

from __future__ import annotations

import asyncio
import random
import time
import urllib.request
from collections.abc import Callable, Sequence

import aiohttp

from orchestrator.bench.overload.fleet import MODEL, LoadSpec, UniformFleet
from orchestrator.bench.overload.outcomes import Outcome, RunResult
from orchestrator.bench.overload.processes import RssSampler, running_router

FILLER = "fleet status report line "  # 25 bytes: about six tokens at four bytes a token


def prompt_of(index: int, tokens: int) -> str:
    """A prompt of about `tokens` tokens (four bytes each) that starts with its own number, so
    no two requests share a prefix."""
    head = f"request {index}: "
    size = max(0, 4 * tokens - len(head))
    return head + (FILLER * (size // len(FILLER) + 1))[:size]


async def _request(
    session: aiohttp.ClientSession, url: str, fleet: UniformFleet, index: int, outcome: Outcome
) -> None:
    body = {
        "model": MODEL,
        "prompt": prompt_of(index, fleet.prompt_tokens),
        "max_tokens": outcome.max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    started = time.perf_counter()
    async with session.post(
        f"{url}/v1/completions", json=body, headers={"X-Priority": outcome.priority}
    ) as response:
        outcome.status = response.status
        outcome.answered_s = time.perf_counter() - started
        outcome.retry_after = response.headers.get("Retry-After")
        if response.status != 200:
            await response.read()
            outcome.finished = True
            return
        async for line in response.content:
            if not line.startswith(b"data: "):
                continue
            if line.startswith(b"data: [DONE]"):
                continue
            if b'"error"' in line:
                outcome.error_event = True
                continue
            if b'"text"' in line:
                if outcome.ttft_s is None:
                    outcome.ttft_s = time.perf_counter() - started
                outcome.tokens += 1
        outcome.finished = True


async def offer_load(url: str, fleet: UniformFleet, load: LoadSpec) -> tuple[list[Outcome], float]:
    """Poisson arrivals at `load.load` × the capacity rate; returns outcomes and wall seconds."""
    rate = load.load * fleet.capacity_requests
    rng = random.Random(load.seed)
    outcomes: list[Outcome] = []
    tasks: list[asyncio.Task[None]] = []
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        loop = asyncio.get_running_loop()
        start = loop.time()
        next_at = start
        while next_at - start < load.duration_s:
            delay = next_at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            priority = "batch" if rng.random() < load.batch_share else "interactive"
            tokens = rng.randint(fleet.output_tokens // 2, fleet.output_tokens * 3 // 2)
            outcome = Outcome(priority, loop.time() - start, tokens)
            outcomes.append(outcome)
            index = len(outcomes)
            tasks.append(asyncio.create_task(_guarded(session, url, fleet, index, outcome)))
            next_at += rng.expovariate(rate)
        _, pending = await asyncio.wait(tasks, timeout=load.drain_s) if tasks else (set(), set())
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        wall_s = loop.time() - start
    return outcomes, wall_s


async def _guarded(
    session: aiohttp.ClientSession, url: str, fleet: UniformFleet, index: int, outcome: Outcome
) -> None:
    try:
        await _request(session, url, fleet, index, outcome)
    except (TimeoutError, aiohttp.ClientError, OSError) as error:
        outcome.failure = type(error).__name__


def run_once(
    name: str,
    fleet: UniformFleet,
    urls: Sequence[str],
    load: LoadSpec,
    *,
    admission: bool,
    router_args: Sequence[str] = (),
) -> RunResult:
    """One run: a fresh router over the running fleet, the load, the outcomes."""
    with (
        running_router(fleet, urls, admission=admission, extra=router_args) as router,
        RssSampler(router) as rss,
        asyncio.Runner(loop_factory=_loop_factory()) as runner,
    ):
        outcomes, wall_s = runner.run(offer_load(router.url, fleet, load))
    return RunResult(name, fleet, load, wall_s, outcomes, rss.samples)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when it is installed: the load generator must not be the bottleneck."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def settle(urls: Sequence[str], timeout_s: float = 120.0) -> None:
    """Wait until the replicas run nothing (a run's leftovers must not load the next run)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        busy = 0.0
        for url in urls:
            try:
                with urllib.request.urlopen(f"{url}/metrics", timeout=2) as response:
                    text = response.read().decode()
            except OSError:
                return
            for line in text.splitlines():
                if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting")):
                    busy += float(line.rsplit(" ", 1)[1])
        if busy == 0:
            return
        time.sleep(0.5)
