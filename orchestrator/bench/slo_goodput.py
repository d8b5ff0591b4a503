"""Goodput under the user's SLO, live: the highest Poisson rate whose requests meet p99 TTFT and
TPOT targets, through our router and, side by side over the same replicas, the peers.

    python -m orchestrator.bench.slo_goodput [--fleet MI355X:2,MI300X:2] [--time-scale 40]
        [--ttft 1.0] [--tpot 0.014] [--prompt-tokens 128] [--output-tokens 16]
        [--routers ours,sglang-router cache_aware,...] [--two-class] [--repeat 1]

The replicas are `orchestrator sim serve` processes (the fleet model's step times, slowed down
`--time-scale` times); targets are stated in real-hardware seconds and stretched by the time
scale like everything else. A probe offers Poisson arrivals at one rate for `--warmup` seconds,
then measures the requests sent in the next `--measure` seconds: the rate *meets the SLO* when
the 99th percentile of those requests' TTFT and of their TPOT (a request refused, failed or cut
short counts as a miss of both) are within the targets. The search brackets upwards from half the
fleet's limit and bisects; the goodput rate is the highest rate found × the share of its requests
that met both targets. Each pool's share is of the output tokens the replicas report generating
during the measured window (their own `vllm:generation_tokens_total`).

The fleet's limit under the SLO comes from the fleet model: for each replica, the largest batch B
whose step (decode of B sequences plus their share of prefill, `StepCostModel`) stays within the
TPOT target, and the rate B / (output tokens × step) it sustains there.

`--two-class` offers interactive requests (tight targets) and batch requests (`--batch-ttft`,
`--batch-tpot`, loose) together, `--two-class-load` × the limit in all, and reports each class's
attainment, goodput and refusals: interactive should meet its targets and batch take the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import random
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from orchestrator.bench.peers import write_tokenizer
from orchestrator.bench.processes import child, free_port, wait_http
from orchestrator.bench.simulate.fleet_spec import FleetSpec, parse_fleet
from orchestrator.core.errors import OrchestratorError
from orchestrator.core.generations import Generation
from orchestrator.fleet.step_cost import StepCostModel, StepWork

ROUTERS = (
    "ours",
    "sglang-router cache_aware",
    "sglang-router power_of_two",
    "vllm-router power_of_two",
)
PERCENTILE = 99.0
_TOKENS = re.compile(rb"^vllm:generation_tokens_total\{[^}]*\} ([0-9.e+]+)$", re.M)


# -- the fleet model's limit ---------------------------------------------------------------------


def step_s(model: StepCostModel, batch: int, prompt: int, output: int) -> float:
    """Real seconds of one engine step decoding `batch` sequences in steady state, each also
    bringing its prompt's share of prefill (prompt / output tokens per step)."""
    return model.step_time_s(
        StepWork(
            decode_sequences=batch,
            decode_context_tokens=round(batch * (prompt + output / 2)),
            prefill_tokens=round(batch * prompt / output),
            prefill_attention_pairs=batch / output * prompt**2 / 2,
        )
    )


@dataclass(frozen=True, slots=True)
class ReplicaLimit:
    generation: Generation
    batch: int  # the largest batch within the TPOT target (0: none)
    step_s: float
    requests_per_s: float  # real time


def replica_limit(generation: Generation, tpot_s: float, prompt: int, output: int) -> ReplicaLimit:
    model = StepCostModel.for_generation(generation)
    best = ReplicaLimit(generation, 0, math.nan, 0.0)
    for batch in range(1, model.figures.engine.max_num_seqs + 1):
        step = step_s(model, batch, prompt, output)
        if step > tpot_s:
            break
        best = ReplicaLimit(generation, batch, step, batch / (output * step))
    return best


def capacity_at(generation: Generation, tpot_s: float, prompt: int, output: int) -> float:
    """Output tokens/s (real) a replica sustains within `tpot_s`: the table's prior."""
    limit = replica_limit(generation, tpot_s, prompt, output)
    return limit.requests_per_s * output


# -- load ---------------------------------------------------------------------------------------


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
    """Poisson arrivals per class; returns the outcomes of requests sent in the measured window."""
    rng = random.Random(load.seed)
    total = sum(load.rates.values())
    classes = list(load.rates)
    weights = [load.rates[c] / total for c in classes]
    measured: list[Outcome] = []
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
            if at - start >= load.warmup_s:
                measured.append(outcome)
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
    return measured


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

    outcomes = asyncio.run(run())
    pools: dict[str, float] = {}
    for generation, tokens in zip(fleet.generations, window, strict=True):
        pools[generation.value] = pools.get(generation.value, 0.0) + tokens
    return Probe(sum(rates.values()), outcomes, pools, targets)


# -- routers ------------------------------------------------------------------------------------


def router_argv(
    name: str, fleet: Fleet, args: argparse.Namespace, port: int, workdir: Path
) -> list[str]:
    if name == "ours":
        entries = "".join(
            f"  - {{id: r{i}-{g.value.lower()}, url: '{u}', pool: {g.value.lower()}, site: local,"
            f" generation: {g.value}, engine: sim, timeScale: {args.time_scale},"
            f" capacityTokensPerS: {args.priors[g] / args.time_scale:.2f}}}\n"
            for i, (g, u) in enumerate(zip(fleet.generations, fleet.urls, strict=True))
        )
        classes = ""
        if args.two_class:
            classes = (
                f"  classes: {{batch: {{ttftS: {args.batch_ttft}, tpotS: {args.batch_tpot}}}}}\n"
            )
        config = workdir / "replicas.yaml"
        config.write_text(
            f"apiVersion: orchestrator/v1alpha1\nkind: Replicas\nmodel: '{fleet.model}'\n"
            f"slo:\n  ttftS: {args.ttft}\n  tpotS: {args.tpot}\n{classes}replicas:\n{entries}"
        )
        return [
            sys.executable, "-m", "orchestrator", "--log-level", "WARNING", "router",
            "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
            "--grpc-port", "0", "--latency-scale", str(args.time_scale),
        ]  # fmt: skip
    family, policy = name.split()
    module = (
        "sglang_router.launch_router" if family == "sglang-router" else "vllm_router.launch_router"
    )
    argv = [
        sys.executable, "-m", module, "--host", "127.0.0.1", "--port", str(port),
        "--worker-urls", *fleet.urls, "--policy", policy, "--prometheus-port", str(free_port()),
    ]  # fmt: skip
    return [*argv, "--log-level", "warn" if family == "sglang-router" else "warning"]


@contextlib.contextmanager
def running_router(
    name: str, fleet: Fleet, args: argparse.Namespace, workdir: Path
) -> Iterator[str]:
    port = free_port()
    log = workdir / f"{name.replace(' ', '-')}.log"
    with child(router_argv(name, fleet, args, port, workdir), log):
        url = f"http://127.0.0.1:{port}"
        try:
            wait_http(url + ("/ready" if name == "ours" else "/health"), 90)
        except RuntimeError as error:
            raise RuntimeError(f"{error}\n{name}'s log:\n{log.read_text()[-3000:]}") from None
        time.sleep(2.0)  # health checks mark every backend ready
        yield url


@dataclass(slots=True)
class Search:
    router: str
    best: Probe | None = None
    probes: list[Probe] = field(default_factory=list)

    @property
    def goodput(self) -> float:
        return 0.0 if self.best is None else self.best.rate * self.best.attainment("interactive")


def rate_search(
    name: str, fleet: Fleet, args: argparse.Namespace, targets: dict[str, Targets], limit: float,
    workdir: Path, seed: int,
) -> Search:  # fmt: skip
    """Bracket upwards from `--start` × the limit by `--step` (or halve down from it), then
    bisect `--bisect` times."""
    search = Search(name)
    with running_router(name, fleet, args, workdir) as url:

        def attempt(rate: float) -> bool:
            found = probe(fleet, url, {"interactive": rate}, targets, args, seed)
            search.probes.append(found)
            ttft, tpot = found.p99("interactive")
            verdict = "meets" if found.meets() else "misses"
            print(
                f"  {name}: {rate:.2f} req/s {verdict} (p99 TTFT {ttft:.2f} s, TPOT"
                f" {tpot * 1e3:.0f} ms, attainment {found.attainment('interactive'):.1%},"
                f" refused {found.refused('interactive'):.1%}, shares"
                f" {', '.join(f'{p} {v:.1%}' for p, v in found.shares().items())})",
                file=sys.stderr, flush=True,
            )  # fmt: skip
            if found.meets() and (search.best is None or rate > search.best.rate):
                search.best = found
            return found.meets()

        low, high = 0.0, args.start * limit
        for _ in range(args.max_probes):
            if not attempt(high):
                break
            low, high = high, high * args.step
        else:
            return search
        if low == 0.0:  # even the start missed: halve until a rate meets the SLO
            for _ in range(args.max_probes):
                if attempt(high / 2):
                    low = high / 2
                    break
                high /= 2
        if low == 0.0:
            return search
        for _ in range(args.bisect):
            middle = (low + high) / 2
            if attempt(middle):
                low = middle
            else:
                high = middle
    return search


@contextlib.contextmanager
def replicas(
    fleet_spec: FleetSpec, model: str, time_scale: float, workdir: Path
) -> Iterator[Fleet]:
    with contextlib.ExitStack() as stack:
        urls: list[str] = []
        generations: list[Generation] = []
        for pool in fleet_spec.pools:
            for _ in range(pool.replicas):
                port = free_port()
                argv = [
                    sys.executable, "-m", "orchestrator", "sim", "serve", "--generation",
                    pool.generation.value, "--port", str(port), "--time-scale", str(time_scale),
                    "--served-model-name", model, "--seed", str(len(urls)),
                ]  # fmt: skip
                stack.enter_context(child(argv, workdir / f"replica-{len(urls)}.log"))
                urls.append(f"http://127.0.0.1:{port}")
                generations.append(pool.generation)
        for url in urls:
            wait_http(f"{url}/health", 60)
        yield Fleet(urls, generations, model)


# -- report -------------------------------------------------------------------------------------


def format_limits(limits: Sequence[ReplicaLimit], args: argparse.Namespace) -> str:
    lines = [
        f"SLO: p99 TTFT <= {args.ttft:g} s, p99 TPOT <= {args.tpot * 1e3:g} ms (real hardware;"
        f" x{args.time_scale:g} wall); prompt {args.prompt_tokens}, output {args.output_tokens}"
        " tokens",
        "fleet model, per replica: largest batch within the TPOT target, its step, req/s (wall)",
    ]
    for limit in limits:
        lines.append(
            f"  {limit.generation.value}: batch {limit.batch}, step {limit.step_s * 1e3:.1f} ms,"
            f" {limit.requests_per_s / args.time_scale:.2f} req/s"
        )
    total = sum(limit.requests_per_s for limit in limits) / args.time_scale
    lines.append(f"  fleet limit under the SLO: {total:.2f} req/s (wall)")
    return "\n".join(lines)


def format_searches(searches: Sequence[Search], limit: float, generations: Sequence[str]) -> str:
    header = (
        f"{'router':<28}{'SLO rate':>10}{'goodput':>10}{'of limit':>10}"
        + "".join(f"{g + ' share':>14}" for g in generations)
        + f"{'p99 TTFT s':>12}{'p99 TPOT ms':>13}"
    )
    lines = [header, "-" * len(header)]
    best_peer = max((s.goodput for s in searches if s.router != "ours"), default=0.0)
    for search in searches:
        best = search.best
        if best is None:
            lines.append(f"{search.router:<28}{'no probed rate meets the SLO':>40}")
            continue
        shares = best.shares()
        ttft, tpot = best.p99("interactive")
        lines.append(
            f"{search.router:<28}{best.rate:>10.2f}{search.goodput:>10.2f}"
            f"{search.goodput / limit:>10.0%}"
            + "".join(f"{shares.get(g, 0.0):>14.1%}" for g in generations)
            + f"{ttft:>12.2f}{tpot * 1e3:>13.0f}"
        )
    ours = next((s for s in searches if s.router == "ours"), None)
    if ours is not None and best_peer > 0:
        lines.append(f"ours / best peer: {ours.goodput / best_peer:.2f}x")
    return "\n".join(lines)


def two_class(
    name: str, fleet: Fleet, args: argparse.Namespace, targets: dict[str, Targets], limit: float,
    workdir: Path,
) -> Probe:  # fmt: skip
    """Interactive and batch offered together above the limit."""
    total = args.two_class_load * limit
    rates = {
        "interactive": total * args.interactive_share,
        "batch": total * (1 - args.interactive_share),
    }
    with running_router(name, fleet, args, workdir) as url:
        return probe(fleet, url, rates, targets, args, args.seed)


def format_two_class(name: str, found: Probe, batch_limit: float) -> str:
    lines = [f"two classes through {name}, offered {found.rate:.2f} req/s in all:"]
    goodput = 0.0
    for slo_class in ("interactive", "batch"):
        outcomes = found.of(slo_class)
        rate = found.rate * len(outcomes) / max(1, len(found.outcomes))
        ttft, tpot = found.p99(slo_class)
        attained = found.attainment(slo_class)
        goodput += rate * attained
        lines.append(
            f"  {slo_class:<12} offered {rate:6.2f} req/s  attainment {attained:6.1%}"
            f"  goodput {rate * attained:6.2f} req/s  refused {found.refused(slo_class):6.1%}"
            f"  p99 TTFT {ttft:.2f} s  p99 TPOT {tpot * 1e3:.0f} ms"
        )
    shares = ", ".join(f"{pool} {share:.1%}" for pool, share in found.shares().items())
    lines.append(
        f"  goodput together {goodput:.2f} req/s = {goodput / batch_limit:.0%} of the fleet's limit"
        f" at the batch target ({batch_limit:.2f} req/s); token shares: {shares}"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--fleet", default="MI355X:2,MI300X:2")
    parser.add_argument("--time-scale", type=float, default=40.0)
    parser.add_argument("--ttft", type=float, default=1.0, help="p99 TTFT target, real seconds")
    parser.add_argument("--tpot", type=float, default=0.014, help="p99 TPOT target, real seconds")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--warmup", type=float, default=25.0, help="wall seconds before measuring")
    parser.add_argument("--measure", type=float, default=20.0, help="measured wall seconds")
    parser.add_argument("--drain", type=float, default=25.0, help="wall seconds to finish after")
    parser.add_argument("--start", type=float, default=0.5, help="first rate, share of the limit")
    parser.add_argument("--step", type=float, default=1.25)
    parser.add_argument("--bisect", type=int, default=1)
    parser.add_argument("--max-probes", type=int, default=6)
    parser.add_argument("--routers", default=",".join(ROUTERS))
    parser.add_argument("--repeat", type=int, default=1, help="searches per router (seeds)")
    parser.add_argument("--two-class", action="store_true")
    parser.add_argument("--batch-ttft", type=float, default=30.0)
    parser.add_argument("--batch-tpot", type=float, default=0.08)
    parser.add_argument("--two-class-load", type=float, default=1.5)
    parser.add_argument("--interactive-share", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        fleet_spec = parse_fleet(args.fleet)
    except OrchestratorError as error:
        parser.error(error.message)
    names = [n.strip() for n in args.routers.split(",") if n.strip()]
    unknown = [n for n in names if n not in ROUTERS]
    if unknown:
        parser.error(f"unknown routers {unknown}; known: {', '.join(ROUTERS)}")
    generations = [p.generation for p in fleet_spec.pools for _ in range(p.replicas)]
    limits = [
        replica_limit(g, args.tpot, args.prompt_tokens, args.output_tokens) for g in generations
    ]
    limit = sum(x.requests_per_s for x in limits) / args.time_scale
    # the table's priors: what each replica sustains at MLPerf's 80 ms (the reference target)
    args.priors = {
        g: capacity_at(g, 0.080, args.prompt_tokens, args.output_tokens) for g in set(generations)
    }
    print(format_limits(limits, args), flush=True)
    scale = args.time_scale
    targets = {
        "interactive": Targets(args.ttft * scale, args.tpot * scale),
        "batch": Targets(args.batch_ttft * scale, args.batch_tpot * scale),
    }
    pools = sorted({g.value for g in generations})
    with tempfile.TemporaryDirectory(prefix="slo-goodput-") as folder:
        workdir = Path(folder)
        model = write_tokenizer(workdir / "gpt-oss-120b")
        with replicas(fleet_spec, model, scale, workdir) as fleet:
            if args.two_class:
                batch_limits = [
                    replica_limit(g, args.batch_tpot, args.prompt_tokens, args.output_tokens)
                    for g in generations
                ]
                batch_limit = sum(x.requests_per_s for x in batch_limits) / scale
                print(f"fleet limit at the batch TPOT target: {batch_limit:.2f} req/s", flush=True)
                for name in names:
                    found = two_class(name, fleet, args, targets, batch_limit, workdir)
                    print(format_two_class(name, found, batch_limit), flush=True)
                return 0
            rounds: list[list[Search]] = []
            for repeat in range(args.repeat):
                print(f"round {repeat + 1}/{args.repeat}", file=sys.stderr, flush=True)
                searches = [
                    rate_search(n, fleet, args, targets, limit, workdir, args.seed + repeat)
                    for n in names
                ]
                rounds.append(searches)
                print(format_searches(searches, limit, pools), flush=True)
    if args.repeat > 1:
        print("goodput req/s per round; median (min-max):")
        for index, name in enumerate(names):
            values = [r[index].goodput for r in rounds]
            print(
                f"  {name:<28} {statistics.median(values):.2f}"
                f" ({min(values):.2f}-{max(values):.2f})  {', '.join(f'{v:.2f}' for v in values)}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
