"""Overload: a real router in front of time-scaled simulated replicas, offered more than the fleet
can serve, with admission control on and off side by side, and a priorities run.

    python -m orchestrator.bench.overload [--duration 60] [--load 3] [--replicas 2]

The fleet's capacity is the sum of the replicas' capacity priors (the fleet model's MLPerf Server
figure for the generation, divided by the time scale: output tokens/s within the latency
targets), and the request rate at capacity is that over the tokens each request asks for. Load is
open-loop (Poisson arrivals at `--load` × that rate), every request streamed, its output length
drawn uniformly from half to one and a half times `--output-tokens`. A request is *good*
when it got 200, all its tokens and its first token within the TTFT target; goodput is good
requests' output tokens per second over the run. Refused requests are timed to their 429. The
router runs in its own process; its RSS is sampled every half second. Requests still running
`--drain` seconds after the offered load stops are cancelled and counted as unfinished.

The priorities run offers `--priority-load` × capacity with half the requests `X-Priority: batch`.
Every process it starts (replicas, router) listens on loopback and is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from orchestrator.core.arg_types import (
    from_parser,
    non_negative_float,
    positive_float,
    positive_int,
    seconds,
)
from orchestrator.core.generations import Generation, parse_generation
from orchestrator.core.slo import MLPERF_TPOT_S as TARGET_TPOT_S
from orchestrator.core.slo import MLPERF_TTFT_S as TARGET_TTFT_S
from orchestrator.fleet.step_cost import StepCostModel, StepWork
from orchestrator.routing.stats import HEADROOM

MODEL = "openai/gpt-oss-120b"
FILLER = "fleet status report line "  # 25 bytes: about six tokens at four bytes a token
READY_WITHIN_S = 60.0
RSS_EVERY_S = 0.5


def workload_capacity_tokens_per_s(
    generation: Generation, prompt_tokens: int, output_tokens: int
) -> float:
    """Output tokens/s one replica sustains on this workload within the TPOT target (real time).

    From the simulated engine's own step-cost model: in steady state a step decodes B
    sequences and prefills B·prompt/output prompt tokens; B* is the largest batch whose step
    takes at most the estimator's headroom × the TPOT target, and the capacity is B*/step.
    """
    model = StepCostModel.for_generation(generation)
    limit_s = HEADROOM * TARGET_TPOT_S
    best = 0.0
    context = prompt_tokens + output_tokens / 2
    for batch in range(1, model.figures.engine.max_num_seqs + 1):
        step_s = model.step_time_s(
            StepWork(
                decode_sequences=batch,
                decode_context_tokens=batch * context,
                prefill_tokens=round(batch * prompt_tokens / output_tokens),
                prefill_attention_pairs=batch / output_tokens * prompt_tokens**2 / 2,
            )
        )
        if step_s > limit_s:
            break
        best = batch / step_s
    return best


@dataclass(frozen=True, slots=True)
class FleetSpec:
    """The simulated fleet: `replicas` replicas of `generation` slowed down `time_scale` times,
    serving requests of `prompt_tokens` in and `output_tokens` out (ignore_eos).

    Each replica's capacity is its step-cost model's on this workload (the table's
    `capacityTokensPerS`, as an operator who benchmarked it would set), unless
    `capacity_tokens_per_s` overrides it."""

    replicas: int = 2
    generation: Generation = Generation.MI300X
    time_scale: float = 2.0
    prompt_tokens: int = 2000
    output_tokens: int = 32
    capacity_tokens_per_s: float | None = None

    def replica_capacity(self) -> float:
        if self.capacity_tokens_per_s is not None:
            return self.capacity_tokens_per_s
        real = workload_capacity_tokens_per_s(
            self.generation, self.prompt_tokens, self.output_tokens
        )
        return real / self.time_scale

    @property
    def capacity_tokens(self) -> float:
        """The fleet's output tokens/s within the latency targets."""
        return self.replicas * self.replica_capacity()

    @property
    def capacity_requests(self) -> float:
        return self.capacity_tokens / self.output_tokens

    @property
    def target_ttft_s(self) -> float:
        return TARGET_TTFT_S * self.time_scale


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """Open-loop load: `load` × the capacity rate for `duration_s`, `batch_share` of it batch."""

    load: float = 3.0
    duration_s: float = 60.0
    batch_share: float = 0.0
    drain_s: float = 30.0
    seed: int = 0


@dataclass(slots=True)
class Outcome:
    priority: str
    sent_s: float = 0.0  # since the load began
    max_tokens: int = 0
    status: int = 0  # 0: no answer (connection failed or cancelled)
    answered_s: float = math.nan  # seconds to the response head
    ttft_s: float | None = None
    tokens: int = 0
    error_event: bool = False
    finished: bool = False
    retry_after: str | None = None
    failure: str | None = None  # the client's exception, when there was no whole answer


@dataclass(slots=True)
class RunResult:
    name: str
    fleet: FleetSpec
    load: LoadSpec
    wall_s: float
    outcomes: list[Outcome]
    rss_mib: list[tuple[float, float]] = field(default_factory=list)

    def of(self, priority: str | None = None) -> list[Outcome]:
        return [o for o in self.outcomes if priority is None or o.priority == priority]

    def admitted(self, priority: str | None = None) -> list[Outcome]:
        return [o for o in self.of(priority) if o.status == 200]

    def refused(self, priority: str | None = None) -> list[Outcome]:
        return [o for o in self.of(priority) if o.status == 429]

    def good(self, priority: str | None = None) -> list[Outcome]:
        target = self.fleet.target_ttft_s
        return [
            o
            for o in self.admitted(priority)
            if o.finished
            and not o.error_event
            and o.ttft_s is not None
            and o.ttft_s <= target
            and o.tokens >= o.max_tokens
        ]

    def ttft_p99_s(self, priority: str | None = None) -> float:
        return percentile([o.ttft_s for o in self.admitted(priority) if o.ttft_s is not None], 99)

    def refused_ms(self, q: float, priority: str | None = None) -> float:
        return 1000 * percentile([o.answered_s for o in self.refused(priority)], q)

    @property
    def goodput_tokens(self) -> float:
        return sum(o.tokens for o in self.good()) / self.wall_s

    @property
    def goodput_share(self) -> float:
        return self.goodput_tokens / self.fleet.capacity_tokens

    def rss_at(self, share: float) -> float:
        if not self.rss_mib:
            return math.nan
        end_s = self.rss_mib[-1][0]
        return next(rss for at_s, rss in self.rss_mib if at_s >= share * end_s)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (nearest rank) of `values`; NaN when there are none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


# -- processes ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def _wait_for(url: str, what: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_WITHIN_S
    while _status(url) != 200:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready within {READY_WITHIN_S:.0f} s")
        time.sleep(0.05)


def _spawn(args: Sequence[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "--log-level", "WARNING", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextlib.contextmanager
def running_fleet(fleet: FleetSpec) -> Iterator[list[str]]:
    """The simulated replicas as child processes; yields their base URLs."""
    processes: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for index in range(fleet.replicas):
            port = free_port()
            command = [
                "sim",
                "serve",
                "--generation",
                fleet.generation.value,
                "--seed",
                str(index),
                "--port",
                str(port),
                "--time-scale",
                str(fleet.time_scale),
            ]
            processes.append(_spawn(command))
            urls.append(f"http://127.0.0.1:{port}")
        for url, process in zip(urls, processes, strict=True):
            _wait_for(f"{url}/health", "a simulated replica", process)
        yield urls
    finally:
        for process in processes:
            _stop(process)


def replicas_file(fleet: FleetSpec, urls: Sequence[str], directory: Path) -> Path:
    lines = ["apiVersion: orchestrator/v1alpha1", "kind: Replicas", f"model: {MODEL}", "replicas:"]
    for index, url in enumerate(urls):
        extra = f", capacityTokensPerS: {fleet.replica_capacity() * fleet.time_scale:.1f}"
        lines.append(
            f'  - {{id: sim-{index}, url: "{url}", pool: pool-{fleet.generation.value.lower()},'
            f" site: lab, generation: {fleet.generation.value}, engine: sim,"
            f" timeScale: {fleet.time_scale}{extra}}}"
        )
    path = directory / "replicas.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@dataclass
class RouterProcess:
    process: subprocess.Popen[bytes]
    url: str

    def rss_mib(self) -> float:
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
        except OSError:
            return math.nan
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return math.nan


@contextlib.contextmanager
def running_router(
    fleet: FleetSpec, urls: Sequence[str], *, admission: bool, extra: Sequence[str] = ()
) -> Iterator[RouterProcess]:
    """`orchestrator router` over `urls` in a child process, ready on entry."""
    with tempfile.TemporaryDirectory(prefix="overload-") as directory:
        config = replicas_file(fleet, urls, Path(directory))
        port = free_port()
        process = _spawn([
            "router", "--config", str(config), "--port", str(port), "--grpc-port", "0",
            "--metrics-port", "0",
            "--latency-scale", str(fleet.time_scale), "--admission", "on" if admission else "off",
            *extra,
        ])  # fmt: skip
        router = RouterProcess(process, f"http://127.0.0.1:{port}")
        try:
            _wait_for(f"{router.url}/ready", "the router", process)
            yield router
        finally:
            _stop(process)


# -- load ------------------------------------------------------------------------------------------


def prompt_of(index: int, tokens: int) -> str:
    """A prompt of about `tokens` tokens (four bytes each) that starts with its own number, so
    no two requests share a prefix."""
    head = f"request {index}: "
    size = max(0, 4 * tokens - len(head))
    return head + (FILLER * (size // len(FILLER) + 1))[:size]


async def _request(
    session: aiohttp.ClientSession, url: str, fleet: FleetSpec, index: int, outcome: Outcome
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


async def offer_load(url: str, fleet: FleetSpec, load: LoadSpec) -> tuple[list[Outcome], float]:
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
    session: aiohttp.ClientSession, url: str, fleet: FleetSpec, index: int, outcome: Outcome
) -> None:
    try:
        await _request(session, url, fleet, index, outcome)
    except (TimeoutError, aiohttp.ClientError, OSError) as error:
        outcome.failure = type(error).__name__


class RssSampler:
    """Samples a process's RSS every `RSS_EVERY_S` in a thread while in use."""

    def __init__(self, router: RouterProcess) -> None:
        self._router = router
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            self.samples.append((time.monotonic() - start, self._router.rss_mib()))
            self._stop.wait(RSS_EVERY_S)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def run_once(
    name: str,
    fleet: FleetSpec,
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


# -- reports ---------------------------------------------------------------------------------------


def overload_table(runs: Sequence[RunResult]) -> str:
    fleet = runs[0].fleet
    rows: list[tuple[str, Callable[[RunResult], str]]] = [
        ("offered requests", lambda r: f"{len(r.outcomes)}"),
        ("admitted (200)", lambda r: f"{len(r.admitted())}"),
        ("refused (429)", lambda r: f"{len(r.refused())}"),
        (
            "other / no answer",
            lambda r: f"{len(r.outcomes) - len(r.admitted()) - len(r.refused())}",
        ),
        ("unfinished at drain", lambda r: f"{sum(1 for o in r.admitted() if not o.finished)}"),
        ("admitted p50 TTFT s", lambda r: _fmt(percentile(_ttfts(r), 50))),
        ("admitted p99 TTFT s", lambda r: _fmt(r.ttft_p99_s())),
        ("TTFT target s", lambda r: _fmt(fleet.target_ttft_s)),
        ("429 p50 ms", lambda r: _fmt(r.refused_ms(50), 1)),
        ("429 p99 ms", lambda r: _fmt(r.refused_ms(99), 1)),
        ("goodput tok/s", lambda r: _fmt(r.goodput_tokens, 1)),
        ("fleet capacity tok/s", lambda r: _fmt(fleet.capacity_tokens, 1)),
        ("goodput / capacity", lambda r: f"{100 * r.goodput_share:.0f}%"),
        ("router RSS MiB @25%", lambda r: _fmt(r.rss_at(0.25), 1)),
        ("router RSS MiB end", lambda r: _fmt(r.rss_at(1.0), 1)),
        ("router RSS MiB max", lambda r: _fmt(max((s for _, s in r.rss_mib), default=math.nan), 1)),
    ]
    return _table(
        ["", *(r.name for r in runs)], [[label, *(f(r) for r in runs)] for label, f in rows]
    )


def priority_table(run: RunResult) -> str:
    target = run.fleet.target_ttft_s
    header = ["priority", "offered", "admitted", "refused", "p99 TTFT s", "target s", "good"]
    body = [
        [
            priority,
            str(len(run.of(priority))),
            str(len(run.admitted(priority))),
            str(len(run.refused(priority))),
            _fmt(run.ttft_p99_s(priority)),
            _fmt(target),
            str(len(run.good(priority))),
        ]
        for priority in ("interactive", "batch")
    ]
    return _table(header, body)


def _ttfts(run: RunResult) -> list[float]:
    return [o.ttft_s for o in run.admitted() if o.ttft_s is not None]


def _fmt(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(
            zip(row, widths, strict=True)))
        for row in (header, *rows)
    ]  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--duration", type=seconds, default=60.0, help="seconds of load per run")
    parser.add_argument("--load", type=positive_float, default=3.0, help="offered load / capacity")
    parser.add_argument(
        "--priority-load", type=positive_float, default=2.0, help="same, priorities run"
    )
    parser.add_argument("--replicas", type=positive_int, default=2)
    parser.add_argument(
        "--generation", type=from_parser(parse_generation), default=Generation.MI300X
    )
    parser.add_argument("--time-scale", type=positive_float, default=2.0)
    parser.add_argument("--prompt-tokens", type=positive_int, default=2000)
    parser.add_argument("--output-tokens", type=positive_int, default=32)
    parser.add_argument(
        "--drain", type=non_negative_float, default=30.0, help="seconds to wait after load"
    )
    parser.add_argument("--skip-priorities", action="store_true")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    fleet = FleetSpec(
        args.replicas,
        args.generation,
        args.time_scale,
        args.prompt_tokens,
        args.output_tokens,
    )
    load = LoadSpec(args.load, args.duration, drain_s=args.drain)
    figures: dict[str, object] = {}
    with running_fleet(fleet) as urls:
        runs = []
        for name, admission in (("admission on", True), ("admission off", False)):
            print(f"running: {name} ({args.duration:.0f} s at {args.load}x)", file=sys.stderr)
            runs.append(run_once(name, fleet, urls, load, admission=admission))
            settle(urls)
        what = f"{fleet.replicas} x {fleet.generation.value}, time scale {fleet.time_scale}"
        print(f"Overload: {args.load}x the fleet's capacity for {args.duration:.0f} s ({what})")
        print(overload_table(runs))
        figures["overload"] = [_summary(run) for run in runs]
        if not args.skip_priorities:
            mixed = LoadSpec(args.priority_load, args.duration, 0.5, args.drain)
            print(f"running: priorities ({args.priority_load}x)", file=sys.stderr)
            run = run_once("priorities", fleet, urls, mixed, admission=True)
            print(f"\nPriorities: {args.priority_load}x, half the requests batch")
            print(priority_table(run))
            figures["priorities"] = _summary(run)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


def _summary(run: RunResult) -> dict[str, object]:
    return {
        "name": run.name,
        "offered": len(run.outcomes),
        "admitted": len(run.admitted()),
        "refused": len(run.refused()),
        "ttft_p99_s": run.ttft_p99_s(),
        "target_ttft_s": run.fleet.target_ttft_s,
        "refused_p99_ms": run.refused_ms(99),
        "goodput_share": run.goodput_share,
        "rss_mib": [run.rss_at(0.25), run.rss_at(1.0)],
        "by_priority": {
            p: {
                "admitted": len(run.admitted(p)),
                "refused": len(run.refused(p)),
                "ttft_p99_s": run.ttft_p99_s(p),
            }
            for p in ("interactive", "batch")
        },
    }


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
