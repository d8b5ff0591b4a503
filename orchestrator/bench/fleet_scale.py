"""What watching a fleet's load costs: one router over 8, 128 and 512 replicas, scraping them
itself (a replicas file, today's path before this bench's issue) and following a control plane
that scrapes each engine once and streams the load in the routing table, side by side.

    python -m orchestrator.bench.fleet_scale [--replicas 8,128,512] [--repeat 2] [--idle 10]
        [--duration 5] [--routers 4] [--spread-duration 12] [--spread-only] [--before DIR]
        [--json results.json]

`--before DIR` adds the router of another checkout (`git archive main | tar -x -C DIR`), scraping
every replica itself and following this tree's control plane, a row beside each of this tree's.

The replicas are instant engines, many per process (`static_backend --count N --vllm-page`), each
serving a vLLM-sized `/metrics` page (gauges, counters, a dozen histograms: about 35 KB). Per fleet
size and mode it measures the router's CPU while idle (share of one core, from /proc), `/health`
latency while it watches the fleet (p99 of 100 sequential requests), non-streaming completions/s
at 32 connections (`wrk`) and the router's CPU (user + system) per completion meanwhile (the
figure that tells the router's own cost from the machine's: completions/s falls with either), and,
following the control plane, the p99 age of the load report each
decision used (the router's `orchestrator_router_decision_load_age_seconds`) and the CPU of each
control-plane process: the registry actor, the gRPC server (this process), and the scrapers, one
`ExternalCheckerActor` per 64 replicas (one per node of 8 × 8 GPUs; the replica actors of a Ray
cluster scrape their own engines the same way, one per replica). Then `--routers` routers follow
the same control plane over 8 replicas that hold each completion 2 s (a short decode: longer
than a report interval) and report what they hold:
the spread of in-flight requests across these equal replicas (coefficient of variation, sampled
during load, over the whole run and from the third round of requests on, once every router has
had a report of the others' first round) with that many routers, each given about half the
connections of the one before, against one router with them all.

Everything runs on loopback and is stopped at the end. The machine's load average is printed with
the figures: on a shared machine, they move with it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator.bench.process_probes import (
    cpu_shares,
    health_p99_ms,
    histogram_p99,
    metric_samples,
    session_cpu_seconds,
)
from orchestrator.bench.processes import child, free_port, wait_http
from orchestrator.bench.watched_fleet import MODEL, control_plane, engines, replicas_file
from orchestrator.bench.wrk import wrk_script
from orchestrator.core.arg_types import positive_int, positive_ints, seconds

CONNECTIONS = 32
SPREAD_REPLICAS = 8
SPREAD_DELAY_MS = 2000
SPREAD_CONNECTIONS = 64
SPREAD_DURATION_S = 12.0
SETTLED_AFTER_S = 2 * SPREAD_DELAY_MS / 1000 + 0.5


@dataclass(frozen=True, slots=True)
class ScaleRow:
    """One router over `replicas` replicas, `mode` "scrapes itself" or "follows control plane"."""

    mode: str
    replicas: int
    router_idle_cpu: float  # share of one core
    health_p99_ms: float
    requests_per_s: float
    router_us_per_request: float  # the router's CPU (user + system) during wrk, per completion
    decision_load_age_p99_s: float | None = None
    control_plane_cpu: float | None = None  # all its processes together, share of one core
    registry_cpu: float | None = None
    server_cpu: float | None = None
    busiest_scraper_cpu: float | None = None
    scrapers: int = 0
    load_average: float = 0.0


@dataclass(frozen=True, slots=True)
class SpreadRow:
    routers: int
    in_flight_cv: float  # stddev / mean of in-flight across equal replicas, mean over samples
    in_flight_max_over_mean: float
    load_average: float
    # the same over the samples from the third round of requests on (`SETTLED_AFTER_S`): the
    # first round's places are drawn before any report shows the other routers' requests
    settled_cv: float | None = None
    settled_max_over_mean: float | None = None


def router_argv(
    port: int,
    *,
    replicas: Path | None = None,
    control_plane: int = 0,
    metrics_port: int | None = 0,
) -> list[str]:
    """`metrics_port` 0: no metrics port; None: leave the flag out (a checkout from before it)."""
    source = (
        ["--config", str(replicas)]
        if replicas is not None
        else ["--control-plane", f"127.0.0.1:{control_plane}"]
    )
    metrics = [] if metrics_port is None else ["--metrics-port", str(metrics_port)]
    return [sys.executable, "-m", "orchestrator", "router", *source, "--host", "127.0.0.1",
            "--port", str(port), "--grpc-port", "0", *metrics]  # fmt: skip


@contextlib.contextmanager
def router(
    argv: list[str], port: int, log: Path, checkout: Path | None = None
) -> Iterator[tuple[str, int]]:
    """A router process; from `checkout`'s code instead of this one's when given."""
    url = f"http://127.0.0.1:{port}"
    env = None if checkout is None else {**os.environ, "PYTHONPATH": str(checkout)}
    with child(argv, log, env=env, cwd=checkout) as process:
        try:
            wait_http(f"{url}/ready", 120, process=process)
        except RuntimeError as error:
            raise RuntimeError(f"{error}\nrouter log:\n{log.read_text()[-3000:]}") from None
        yield url, process.pid


def measure_router(
    url: str, pid: int, *, idle_s: float, duration_s: float, workdir: Path
) -> tuple[float, float, float, float]:
    """Idle CPU share, /health p99 ms, completions/s and the router's CPU µs per completion."""
    time.sleep(3.0)  # past the first round of scrapes or the first snapshot
    idle = cpu_shares({"router": pid}, idle_s)["router"]
    health = health_p99_ms(url)
    return idle, health, *completions_per_s(url, pid, duration_s, workdir)


def completions_per_s(url: str, pid: int, duration_s: float, workdir: Path) -> tuple[float, float]:
    """wrk's rate at `CONNECTIONS`, and the CPU (user + system) the router `pid` and its session
    spent meanwhile per completion: what the router costs per request, which the machine's other
    load moves far less than the rate. A router too slow to answer within wrk's timeout counts
    only the completions that did come back."""
    script = wrk_script(workdir / "plain.lua", MODEL, stream=False)
    command = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{duration_s:g}s", "--timeout", "10s",
               "-s", str(script), f"{url}/v1/completions"]  # fmt: skip
    subprocess.run([*command[:3], "-d1s", *command[4:]], capture_output=True, timeout=90)
    cpu_before = session_cpu_seconds(pid)
    output = subprocess.run(command, capture_output=True, text=True, timeout=duration_s + 90)
    cpu_s = session_cpu_seconds(pid) - cpu_before
    found = re.search(r"(\d+) requests in ([\d.]+)s", output.stdout)
    timeouts = re.search(r"timeout (\d+)", output.stdout)
    if found is None:
        raise RuntimeError(f"wrk printed no count against {url}:\n{output.stdout}")
    done = max(0, int(found.group(1)) - (int(timeouts.group(1)) if timeouts else 0))
    return done / float(found.group(2)), (cpu_s / done * 1e6 if done else math.inf)


def scale_rows(
    count: int,
    *,
    idle_s: float,
    duration_s: float,
    workdir: Path,
    namespace: str,
    before: Path | None = None,
) -> list[ScaleRow]:
    rows = []
    with engines(count, workdir) as urls:
        checkouts: list[tuple[str, Path | None]] = [("scrapes itself", None)]
        if before is not None:
            checkouts.insert(0, ("scrapes itself, before", before))
        for mode, checkout in checkouts:
            port = free_port()
            argv = router_argv(port, replicas=replicas_file(urls, workdir),
                               metrics_port=None if checkout else 0)  # fmt: skip
            log = workdir / f"router-file-{count}.log"
            with router(argv, port, log, checkout) as (url, pid):
                idle, health, rate, cost = measure_router(
                    url, pid, idle_s=idle_s, duration_s=duration_s, workdir=workdir
                )
            rows.append(ScaleRow(mode, count, idle, health, rate, cost,
                                 load_average=os.getloadavg()[0]))  # fmt: skip
        with control_plane(urls, namespace) as (cp_port, cp_pids):
            for mode, checkout in [(m.replace("scrapes itself", "follows control plane"), c)
                                   for m, c in checkouts]:  # fmt: skip
                rows.append(_following_row(mode, count, cp_port, cp_pids, idle_s=idle_s,
                                           duration_s=duration_s, workdir=workdir,
                                           checkout=checkout))  # fmt: skip
    return rows


def _following_row(
    mode: str,
    count: int,
    cp_port: int,
    cp_pids: dict[str, int],
    *,
    idle_s: float,
    duration_s: float,
    workdir: Path,
    checkout: Path | None,
) -> ScaleRow:
    """A router (of `checkout`, else this tree) following the control plane at `cp_port`."""
    port, metrics_port = free_port(), free_port()
    argv = router_argv(port, control_plane=cp_port, metrics_port=metrics_port)
    with router(argv, port, workdir / f"router-cp-{count}.log", checkout) as (url, pid):
        time.sleep(3.0)
        shares = cpu_shares({**cp_pids, "router": pid}, idle_s)
        health = health_p99_ms(url)
        rate, cost = completions_per_s(url, pid, duration_s, workdir)
        age = histogram_p99(
            metric_samples(metrics_port), "orchestrator_router_decision_load_age_seconds"
        )
    scrapers = [v for k, v in shares.items() if k.startswith("scraper-")]
    return ScaleRow(
        mode, count, shares["router"], health, rate, cost,
        decision_load_age_p99_s=age,
        control_plane_cpu=sum(v for k, v in shares.items() if k != "router"),
        registry_cpu=shares["registry"], server_cpu=shares["server"],
        busiest_scraper_cpu=max(scrapers), scrapers=len(scrapers),
        load_average=os.getloadavg()[0],
    )  # fmt: skip


def spread_rows(
    routers: int, *, duration_s: float, workdir: Path, namespace: str
) -> list[SpreadRow]:
    rows = []
    with (
        engines(SPREAD_REPLICAS, workdir, delay_ms=SPREAD_DELAY_MS) as urls,
        control_plane(urls, namespace) as (cp_port, _),
    ):
        for count in (1, routers):
            with contextlib.ExitStack() as stack:
                followers = []
                for index in range(count):
                    port, metrics_port = free_port(), free_port()
                    log = workdir / f"router-spread-{count}-{index}.log"
                    argv = router_argv(port, control_plane=cp_port, metrics_port=metrics_port)
                    url = stack.enter_context(router(argv, port, log))[0]
                    followers.append((url, metrics_port))
                time.sleep(3.0)
                rows.append(_spread(followers, duration_s, workdir))
    return rows


def _held_load(url: str, script: Path, connections: int, duration_s: float) -> None:
    """wrk against replicas that hold each request: its 2 s default timeout would cut them."""
    subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{duration_s:g}s", "--timeout", "30s",
         "-s", str(script), url],
        capture_output=True, check=True, timeout=duration_s + 60,
    )  # fmt: skip


def uneven_split(total: int, parts: int) -> list[int]:
    """`total` connections over `parts` routers, each about half the one before (64 over 4:
    34, 17, 9, 4): a router with few requests, balancing only what it sent itself, would put
    them on the same replicas the busy ones just filled."""
    weights = [2.0**-index for index in range(parts)]
    shares = [max(1, round(total * w / sum(weights))) for w in weights]
    shares[0] += total - sum(shares)
    return shares


def independent_floor_cv(
    shares: Sequence[int], replicas: int, *, trials: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """References for the spread's CV with these connections per router: (each router spreading
    its own requests perfectly evenly, where its remainder lands drawn at random, as routers that
    share no decisions draw it; every request placed uniformly at random, as with no load signal
    at all). One router holding every connection spreads exactly (0.0). `wrk`'s closed loop
    finishes and restarts every router's requests in the same wave, and no router learns where
    the others' requests of a wave went before the next report, so the first figure is what
    routers balancing on reports reach at best in this load. Means over `trials` seeded draws:
    the same figures every run."""
    rng = random.Random(seed)

    def cv(counts: list[int]) -> float:
        return statistics.pstdev(counts) / statistics.fmean(counts)

    even, uniform = [], []
    for _ in range(trials):
        counts = [0] * replicas
        for share in shares:
            base, extra = divmod(share, replicas)
            for index in range(replicas):
                counts[index] += base
            for index in rng.sample(range(replicas), extra):
                counts[index] += 1
        even.append(cv(counts))
        counts = [0] * replicas
        for _ in range(sum(shares)):
            counts[rng.randrange(replicas)] += 1
        uniform.append(cv(counts))
    return statistics.fmean(even), statistics.fmean(uniform)


def _spread(routers: list[tuple[str, int]], duration_s: float, workdir: Path) -> SpreadRow:
    """`routers`: each one's URL and metrics port."""
    script = wrk_script(workdir / "plain.lua", MODEL, stream=False)
    loads = [
        threading.Thread(target=_held_load, args=(f"{url}/v1/completions", script, n, duration_s))
        for (url, _), n in zip(routers, uneven_split(SPREAD_CONNECTIONS, len(routers)), strict=True)
    ]
    for load in loads:
        load.start()
    started_s = time.monotonic()
    time.sleep(1.5)
    cvs: list[float] = []
    peaks: list[float] = []
    settled: list[tuple[float, float]] = []  # (cv, max/mean)
    while any(load.is_alive() for load in loads) and len(cvs) < 4 * duration_s:
        in_flight: dict[str, float] = {}
        for _, metrics_port in routers:
            for sample in metric_samples(metrics_port):
                if sample.name == "orchestrator_router_in_flight_requests":
                    replica = sample.labels["replica"]
                    in_flight[replica] = in_flight.get(replica, 0.0) + sample.value
        values = list(in_flight.values())
        if len(values) == SPREAD_REPLICAS and statistics.fmean(values) > 0:
            mean = statistics.fmean(values)
            cvs.append(statistics.pstdev(values) / mean)
            peaks.append(max(values) / mean)
            if time.monotonic() - started_s >= SETTLED_AFTER_S:
                settled.append((cvs[-1], peaks[-1]))
        time.sleep(0.25)
    for load in loads:
        load.join()
    return SpreadRow(
        len(routers), statistics.fmean(cvs), statistics.fmean(peaks), os.getloadavg()[0],
        statistics.fmean(cv for cv, _ in settled) if settled else None,
        statistics.fmean(peak for _, peak in settled) if settled else None,
    )  # fmt: skip


def _fmt(value: float | None, pattern: str, width: int) -> str:
    """`value` in `pattern`, or a dash for none, right-aligned in `width` characters."""
    return format("-" if value is None else format(value, pattern), f">{width}")


def format_scale(rows: Sequence[ScaleRow]) -> str:
    header = (f"{'mode':<30} {'replicas':>8} {'router idle':>11} {'/health p99':>11} "
              f"{'req/s':>7} {'µs/req':>6} {'load age p99':>12} {'CP CPU':>7} {'registry':>8} "
              f"{'server':>7} {'scraper max':>11} {'load avg':>8}")  # fmt: skip
    lines = [header, "-" * len(header)]
    for r in rows:
        age = r.decision_load_age_p99_s
        lines.append(
            f"{r.mode:<30} {r.replicas:>8} {r.router_idle_cpu:>10.1%} {r.health_p99_ms:>9.1f}ms "
            f"{r.requests_per_s:>7.0f} {r.router_us_per_request:>6.0f} "
            f"{_fmt(age, '.2f', 11)}{' ' if age is None else 's'} "
            f"{_fmt(r.control_plane_cpu, '.0%', 7)} {_fmt(r.registry_cpu, '.0%', 8)} "
            f"{_fmt(r.server_cpu, '.0%', 7)} {_fmt(r.busiest_scraper_cpu, '.0%', 11)} "
            f"{r.load_average:>8.1f}"
        )
    return "\n".join(lines)


def format_spread(rows: Sequence[SpreadRow]) -> str:
    header = (f"{'routers':>7} {'in-flight CV':>12} {'max/mean':>8} {'settled CV':>10} "
              f"{'max/mean':>8} {'load avg':>8}")  # fmt: skip
    body = [
        f"{r.routers:>7} {r.in_flight_cv:>12.2f} {r.in_flight_max_over_mean:>8.2f} "
        f"{_fmt(r.settled_cv, '.2f', 10)} {_fmt(r.settled_max_over_mean, '.2f', 8)} "
        f"{r.load_average:>8.1f}"
        for r in rows
    ]
    return "\n".join([header, "-" * len(header), *body])


def median_rows(runs: Sequence[Sequence[ScaleRow]]) -> list[ScaleRow]:
    """Per (mode, replicas), the median of each figure over the runs."""
    out = []
    for index, first in enumerate(runs[0]):
        same = [run[index] for run in runs]
        values: dict[str, Any] = {}
        for name, value in asdict(first).items():
            if isinstance(value, float):
                present = [getattr(row, name) for row in same if getattr(row, name) is not None]
                values[name] = statistics.median(present) if present else None
            else:
                values[name] = value
        out.append(ScaleRow(**values))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--replicas", type=positive_ints, default=(8, 128, 512), help="fleet sizes, comma-separated"
    )
    parser.add_argument(
        "--repeat", type=positive_int, default=2, help="runs per size (medians printed)"
    )
    parser.add_argument("--idle", type=seconds, default=10.0, help="seconds of idle CPU measured")
    parser.add_argument("--duration", type=seconds, default=5.0, help="seconds of wrk load")
    parser.add_argument(
        "--routers", type=positive_int, default=4, help="routers of the spread check"
    )
    parser.add_argument(
        "--spread-duration", type=seconds, default=SPREAD_DURATION_S,
        help="seconds of load in the spread check (its settled figure starts at the third round)",
    )  # fmt: skip
    parser.add_argument(
        "--spread-only", action="store_true", help="only the spread check, no fleet sizes"
    )
    parser.add_argument("--before", type=Path, help="a checkout whose router to measure too")
    parser.add_argument("--json", type=Path, help="write every run's rows here")
    args = parser.parse_args(argv)
    sizes = list(args.replicas)
    import ray

    namespace = "orchestrator-fleet-scale-bench"
    ray.init(address="local", num_cpus=2, include_dashboard=False, namespace=namespace,
             log_to_driver=False)  # fmt: skip
    runs: list[list[ScaleRow]] = []
    spreads: list[list[SpreadRow]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="fleet-scale-") as folder:
            workdir = Path(folder)
            for run in range(args.repeat):
                rows = []
                for count in [] if args.spread_only else sizes:
                    print(f"run {run + 1}/{args.repeat}: {count} replicas ...", file=sys.stderr,
                          flush=True)  # fmt: skip
                    rows += scale_rows(count, idle_s=args.idle, duration_s=args.duration,
                                       workdir=workdir, namespace=namespace,
                                       before=args.before)  # fmt: skip
                runs.append(rows)
                print(f"run {run + 1}/{args.repeat}: {args.routers} routers' spread ...",
                      file=sys.stderr, flush=True)  # fmt: skip
                spreads.append(spread_rows(args.routers, duration_s=args.spread_duration,
                                           workdir=workdir, namespace=namespace))  # fmt: skip
                if rows:
                    print(format_scale(rows), file=sys.stderr, flush=True)
    finally:
        ray.shutdown()
    if not args.spread_only:
        print(f"Fleet scale, medians of {args.repeat} runs (CPU as a share of one core; "
              f"load average of this {os.cpu_count()}-core machine at each row):")  # fmt: skip
        print(format_scale(median_rows(runs)))
    print(f"\nIn-flight spread over {SPREAD_REPLICAS} equal replicas holding each request "
          f"{SPREAD_DELAY_MS} ms, {SPREAD_CONNECTIONS} connections in all, each run:")  # fmt: skip
    print(format_spread([row for spread in spreads for row in spread]))
    split = uneven_split(SPREAD_CONNECTIONS, args.routers)
    floor, uniform = independent_floor_cv(split, SPREAD_REPLICAS)
    print(f"Routers that share no decisions ({'/'.join(map(str, split))} connections), CV: "
          f"{floor:.2f} each spreading its own evenly, {uniform:.2f} placed at random")  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps({
            "scale": [[asdict(r) for r in run] for run in runs],
            "spread": [[asdict(r) for r in spread] for spread in spreads],
        }, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
