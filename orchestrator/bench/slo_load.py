"""Load for the SLO goodput benchmark: Poisson arrivals per class through one router, each
request's outcome (TTFT, TPOT, whole or not) against its class's targets, and one probe's
result with each pool's share of the output tokens."""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import re
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp

from orchestrator.core.generations import Generation

PERCENTILE = 99.0
REPLICA_HEADER = "x-orchestrator-replica"
_TOKENS = re.compile(rb"^vllm:generation_tokens_total\{[^}]*\} ([0-9.e+]+)$", re.M)


@dataclass(slots=True)
class Outcome:
    slo_class: str
    sent_s: float
    status: int = 0
    ttft_s: float | None = None
    last_s: float | None = None
    tokens: int = 0
    wanted: int = 0
    error: bool = False
    replica: str = ""  # the router's `x-orchestrator-replica` answer header, when it sends one

    @property
    def whole(self) -> bool:
        return self.status == 200 and not self.error and self.tokens >= self.wanted

    @property
    def tpot_s(self) -> float | None:
        if not self.whole or self.ttft_s is None or self.last_s is None or self.tokens < 2:
            return None
        return (self.last_s - self.ttft_s) / (self.tokens - 1)


@dataclass(frozen=True, slots=True)
class Targets:
    ttft_s: float  # wall seconds
    tpot_s: float

    def met(self, outcome: Outcome) -> bool:
        tpot = outcome.tpot_s
        return (
            outcome.whole
            and outcome.ttft_s is not None
            and outcome.ttft_s <= self.ttft_s
            and tpot is not None
            and tpot <= self.tpot_s
        )


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile; inf counts (a miss), NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def prompt_of(index: int, tokens: int) -> str:
    head = f"request {index}: "
    filler = "status line of the fleet "
    size = max(0, 4 * tokens - len(head))
    return head + (filler * (size // len(filler) + 1))[:size]


async def _request(
    session: aiohttp.ClientSession, url: str, model: str, index: int, prompt_tokens: int,
    outcome: Outcome,
) -> None:  # fmt: skip
    body = {
        "model": model, "prompt": prompt_of(index, prompt_tokens), "max_tokens": outcome.wanted,
        "ignore_eos": True, "stream": True,
    }  # fmt: skip
    sent = time.perf_counter()
    try:
        async with session.post(
            f"{url}/v1/completions", json=body, headers={"X-Priority": outcome.slo_class}
        ) as response:
            outcome.status = response.status
            outcome.replica = response.headers.get(REPLICA_HEADER, "")
            if response.status != 200:
                await response.read()
                return
            async for line in response.content:
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                if b'"error"' in line:
                    outcome.error = True
                    continue
                if b'"text"' in line:
                    now = time.perf_counter()
                    if outcome.ttft_s is None:
                        outcome.ttft_s = now - sent
                    outcome.last_s = now - sent
                    outcome.tokens += 1
    except (TimeoutError, aiohttp.ClientError, OSError):
        outcome.error = True


@dataclass(frozen=True, slots=True)
class Load:
    rates: dict[str, float]  # requests/s (wall) per class
    warmup_s: float
    measure_s: float
    drain_s: float
    prompt_tokens: int
    output_tokens: int
    seed: int


async def offer(url: str, model: str, load: Load) -> list[Outcome]:
    """Poisson arrivals per class; returns every request's outcome, warm-up ones included."""
    rng = random.Random(load.seed)
    total = sum(load.rates.values())
    classes = list(load.rates)
    weights = [load.rates[c] / total for c in classes]
    sent: list[Outcome] = []
    tasks: list[asyncio.Task[None]] = []
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=load.warmup_s + load.measure_s + load.drain_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        loop = asyncio.get_running_loop()
        start = loop.time()
        at = start
        end = start + load.warmup_s + load.measure_s
        index = 0
        while at < end:
            delay = at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            slo_class = rng.choices(classes, weights)[0]
            outcome = Outcome(slo_class, at - start, wanted=load.output_tokens)
            sent.append(outcome)
            index += 1
            tasks.append(
                asyncio.create_task(
                    _request(session, url, model, index, load.prompt_tokens, outcome)
                )
            )
            at += rng.expovariate(total)
        _, pending = await asyncio.wait(tasks, timeout=load.drain_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return sent


def generated_tokens(urls: Sequence[str]) -> list[float]:
    """Each replica's `vllm:generation_tokens_total` now."""
    out = []
    for url in urls:
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
            text = response.read()
        out.append(sum(float(m) for m in _TOKENS.findall(text)))
    return out


# -- one probe ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Probe:
    rate: float
    outcomes: list[Outcome]
    pool_tokens: dict[str, float]
    targets: dict[str, Targets]
    # requests of each class that met its targets and finished within the measured window, per
    # second of it: what the fleet sustains, whenever they were sent (`completed_goodput`)
    goodputs: dict[str, float] = field(default_factory=dict)
    # each class's requests in flight (sent, not yet ended) as the window opened and as it
    # closed: a count that grows across it says the fleet was still filling (`in_flight_at`)
    in_flight: dict[str, tuple[int, int]] = field(default_factory=dict)

    def of(self, slo_class: str | None = None) -> list[Outcome]:
        return [o for o in self.outcomes if slo_class is None or o.slo_class == slo_class]

    def p99(self, slo_class: str) -> tuple[float, float]:
        ttfts = [
            o.ttft_s if o.whole and o.ttft_s is not None else math.inf for o in self.of(slo_class)
        ]
        tpots = [o.tpot_s if o.tpot_s is not None else math.inf for o in self.of(slo_class)]
        return percentile(ttfts, PERCENTILE), percentile(tpots, PERCENTILE)

    def meets(self, slo_class: str = "interactive") -> bool:
        ttft, tpot = self.p99(slo_class)
        target = self.targets[slo_class]
        return ttft <= target.ttft_s and tpot <= target.tpot_s

    def attainment(self, slo_class: str) -> float:
        outcomes = self.of(slo_class)
        target = self.targets[slo_class]
        return sum(target.met(o) for o in outcomes) / len(outcomes) if outcomes else math.nan

    def refused(self, slo_class: str) -> float:
        outcomes = self.of(slo_class)
        return sum(o.status == 429 for o in outcomes) / len(outcomes) if outcomes else math.nan

    def shares(self) -> dict[str, float]:
        total = sum(self.pool_tokens.values())
        return {pool: tokens / total for pool, tokens in self.pool_tokens.items()} if total else {}


@dataclass(slots=True)
class Fleet:
    urls: list[str]
    generations: list[Generation]
    model: str


def probe(
    fleet: Fleet, router_url: str, rates: dict[str, float], targets: dict[str, Targets],
    args: argparse.Namespace, seed: int,
) -> Probe:  # fmt: skip
    load = Load(
        rates, args.warmup, args.measure, args.drain, args.prompt_tokens, args.output_tokens, seed
    )
    window = [0.0] * len(fleet.urls)

    async def run() -> list[Outcome]:
        # the measured window's token counts: read the replicas when it ends
        task = asyncio.create_task(offer(router_url, fleet.model, load))
        await asyncio.sleep(args.warmup)
        start = await asyncio.to_thread(generated_tokens, fleet.urls)
        await asyncio.sleep(args.measure)
        end = await asyncio.to_thread(generated_tokens, fleet.urls)
        window[:] = [e - s for e, s in zip(end, start, strict=True)]
        return await task

    sent = asyncio.run(run())
    outcomes = [o for o in sent if o.sent_s >= args.warmup]
    pools: dict[str, float] = {}
    for generation, tokens in zip(fleet.generations, window, strict=True):
        pools[generation.value] = pools.get(generation.value, 0.0) + tokens
    goodputs = {
        slo_class: completed_goodput(sent, slo_class, targets[slo_class], args.warmup, args.measure)
        for slo_class in rates
    }
    window_end_s = args.warmup + args.measure
    in_flight = {
        slo_class: (
            in_flight_at(sent, slo_class, args.warmup),
            in_flight_at(sent, slo_class, window_end_s),
        )
        for slo_class in rates
    }
    return Probe(sum(rates.values()), outcomes, pools, targets, goodputs, in_flight)


def in_flight_at(sent: Sequence[Outcome], slo_class: str, at_s: float) -> int:
    """Requests of `slo_class` sent by `at_s` whose last token came after it: in flight then
    (refused and unanswered ones ended at once). More at the window's end than at its start
    means the fleet was still taking on work, and the goodput finished in the window is below
    what it would sustain: a longer `--warmup` measures that."""
    return sum(
        1
        for o in sent
        if o.slo_class == slo_class
        and o.last_s is not None
        and o.sent_s <= at_s < o.sent_s + o.last_s
    )


def completed_goodput(
    sent: Sequence[Outcome], slo_class: str, target: Targets, start_s: float, span_s: float
) -> float:
    """Requests of `slo_class` that met `target` and finished in [start_s, start_s + span_s),
    per second. Above capacity this is the rate the fleet sustains; counting the requests *sent*
    in the window instead credits the ones a loose TTFT target lets wait and finish after it."""
    met = 0
    for outcome in sent:
        if outcome.slo_class != slo_class or outcome.last_s is None or not target.met(outcome):
            continue
        if start_s <= outcome.sent_s + outcome.last_s < start_s + span_s:
            met += 1
    return met / span_s
