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
A class's goodput is the rate of its requests that met its targets and *finished* within the
measured window (`slo_load.completed_goodput`): above capacity, counting those *sent* in it would
credit the batch requests a loose TTFT target lets wait and finish during the drain. Each class's
requests are also shown by the replica they went to (met share, p99 TTFT and TPOT, wall), and
how many were in flight as the window opened and as it closed: more at its close means the
fleet was still taking on work (a batch grows only as fast as requests finish at each size), so
the goodput finished in the window is below what the fleet sustains, and `--warmup` is short.
Their goodput together is set against the fleet model's limit for that mix
(`slo_limits.two_class_limit`): the fastest replicas that hold the interactive rate within its
target serve it (and batch up to that batch), the others batch at the batch target. With
`--repeat N` each router runs N rounds (seeds `--seed` on), each with a fresh router, and the
medians and spreads of the goodput together, interactive attainment and refusals follow.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.bench.peers import write_tokenizer
from orchestrator.bench.processes import child, free_port, wait_http
from orchestrator.bench.simulate.fleet_spec import FleetSpec, parse_fleet
from orchestrator.bench.slo_limits import (
    capacity_at,
    format_limits,
    replica_limit,
    two_class_limit,
)
from orchestrator.bench.slo_load import Fleet, Outcome, Probe, Targets, percentile, probe
from orchestrator.core.arg_types import non_negative_int, positive_float, positive_int
from orchestrator.core.errors import OrchestratorError
from orchestrator.core.generations import Generation

ROUTERS = (
    "ours",
    "sglang-router cache_aware",
    "sglang-router power_of_two",
    "vllm-router power_of_two",
)
PERCENTILE = 99.0
_TOKENS = re.compile(rb"^vllm:generation_tokens_total\{[^}]*\} ([0-9.e+]+)$", re.M)


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
            "--grpc-port", "0", "--metrics-port", "0", "--latency-scale", str(args.time_scale),
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
            if any(outcome.replica for outcome in found.of("interactive")):  # ours names it
                print(f"    by replica: {format_by_replica(found, 'interactive')}", file=sys.stderr)
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
    workdir: Path, seed: int,
) -> Probe:  # fmt: skip
    """Interactive and batch offered together above the limit (a fresh router each time)."""
    total = args.two_class_load * limit
    rates = {
        "interactive": total * args.interactive_share,
        "batch": total * (1 - args.interactive_share),
    }
    with running_router(name, fleet, args, workdir) as url:
        return probe(fleet, url, rates, targets, args, seed)


def format_two_class(name: str, found: Probe, mix_limit: float) -> str:
    lines = [f"two classes through {name}, offered {found.rate:.2f} req/s in all:"]
    goodput = together(found)
    for slo_class in ("interactive", "batch"):
        outcomes = found.of(slo_class)
        rate = found.rate * len(outcomes) / max(1, len(found.outcomes))
        ttft, tpot = found.p99(slo_class)
        attained = found.attainment(slo_class)
        sustained = found.goodputs.get(slo_class, 0.0)
        opened, closed = found.in_flight.get(slo_class, (0, 0))
        lines.append(
            f"  {slo_class:<12} offered {rate:6.2f} req/s  attainment {attained:6.1%}"
            f"  goodput {sustained:6.2f} req/s  refused {found.refused(slo_class):6.1%}"
            f"  p99 TTFT {ttft:.2f} s  p99 TPOT {tpot * 1e3:.0f} ms"
            f"  in flight {opened} -> {closed}"
        )
    for slo_class in ("interactive", "batch"):
        lines.append(f"  {slo_class} by replica: " + format_by_replica(found, slo_class))
    shares = ", ".join(f"{pool} {share:.1%}" for pool, share in found.shares().items())
    lines.append(
        f"  goodput together {goodput:.2f} req/s = {goodput / mix_limit:.0%} of the fleet's limit"
        f" for this mix ({mix_limit:.2f} req/s); token shares: {shares}"
    )
    return "\n".join(lines)


def together(found: Probe) -> float:
    """Both classes' goodput (met and finished in the window), req/s."""
    return sum(found.goodputs.get(slo_class, 0.0) for slo_class in ("interactive", "batch"))


def format_two_class_rounds(name: str, rounds: Sequence[Probe], mix_limit: float) -> str:
    """One router's rounds at one mix: the medians and spreads a single round's noise (a batch
    request lives about as long as the measured window) makes the figures to judge by."""

    def spread(values: Sequence[float], fmt: str) -> str:
        listed = ", ".join(format(v, fmt) for v in values)
        return (
            f"{format(statistics.median(values), fmt)}"
            f" ({format(min(values), fmt)}-{format(max(values), fmt)}; {listed})"
        )

    of_limit = [together(found) / mix_limit for found in rounds]
    attained = [found.attainment("interactive") for found in rounds]
    refused = [found.refused("interactive") for found in rounds]
    met = sum(found.meets("interactive") for found in rounds)
    return "\n".join(
        [
            f"{name}, {len(rounds)} rounds: median (min-max; each)",
            f"  goodput together, of the mix's limit  {spread(of_limit, '.0%')}",
            f"  interactive attainment                {spread(attained, '.1%')}",
            f"  interactive refused                   {spread(refused, '.1%')}",
            f"  interactive met its p99 targets in {met} of {len(rounds)} rounds",
        ]
    )


def format_by_replica(found: Probe, slo_class: str) -> str:
    """Where a class's measured requests went and how each replica did: requests, met share,
    p99 TTFT (s) and TPOT (ms) of the whole ones; "-" for those refused or never answered."""
    target = found.targets[slo_class]
    groups: dict[str, list[Outcome]] = {}
    for outcome in found.of(slo_class):
        groups.setdefault(outcome.replica or "-", []).append(outcome)
    parts = []
    for replica, outcomes in sorted(groups.items()):
        whole = [o for o in outcomes if o.tpot_s is not None and o.ttft_s is not None]
        met = sum(target.met(o) for o in outcomes) / len(outcomes)
        ttft = percentile([o.ttft_s for o in whole if o.ttft_s is not None], PERCENTILE)
        tpot = percentile([o.tpot_s for o in whole if o.tpot_s is not None], PERCENTILE)
        parts.append(
            f"{replica} {len(outcomes)} met {met:.0%} TTFT {ttft:.1f} TPOT {tpot * 1e3:.0f}"
        )
    return "; ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--fleet", default="MI355X:2,MI300X:2")
    parser.add_argument("--time-scale", type=positive_float, default=40.0)
    parser.add_argument(
        "--ttft", type=positive_float, default=1.0, help="p99 TTFT target, real seconds"
    )
    parser.add_argument(
        "--tpot", type=positive_float, default=0.014, help="p99 TPOT target, real seconds"
    )
    parser.add_argument("--prompt-tokens", type=positive_int, default=128)
    parser.add_argument("--output-tokens", type=positive_int, default=16)
    parser.add_argument(
        "--warmup", type=positive_float, default=25.0, help="wall seconds before measuring"
    )
    parser.add_argument(
        "--measure", type=positive_float, default=20.0, help="measured wall seconds"
    )
    parser.add_argument(
        "--drain", type=positive_float, default=25.0, help="wall seconds to finish after"
    )
    parser.add_argument(
        "--start", type=positive_float, default=0.5, help="first rate, share of the limit"
    )
    parser.add_argument("--step", type=positive_float, default=1.25)
    parser.add_argument("--bisect", type=non_negative_int, default=2)
    parser.add_argument("--max-probes", type=positive_int, default=6)
    parser.add_argument("--routers", default=",".join(ROUTERS))
    parser.add_argument(
        "--repeat",
        type=positive_int,
        default=1,
        help="searches (or two-class rounds) per router, each with the next seed; medians after",
    )
    parser.add_argument("--two-class", action="store_true")
    parser.add_argument("--batch-ttft", type=positive_float, default=30.0)
    parser.add_argument("--batch-tpot", type=positive_float, default=0.08)
    parser.add_argument("--two-class-load", type=positive_float, default=1.5)
    parser.add_argument("--interactive-share", type=positive_float, default=0.3)
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
                tight_rate = args.two_class_load * batch_limit * args.interactive_share
                mix_limit, held = two_class_limit(
                    [x.requests_per_s / scale for x in limits],
                    [x.requests_per_s / scale for x in batch_limits],
                    tight_rate,
                )
                print(
                    f"fleet limit at the batch TPOT target: {batch_limit:.2f} req/s; for this mix"
                    f" (interactive {tight_rate:.2f} req/s met on the {held} fastest replicas,"
                    f" batch on the rest): {mix_limit:.2f} req/s",
                    flush=True,
                )
                by_router: dict[str, list[Probe]] = {name: [] for name in names}
                for repeat in range(args.repeat):
                    if args.repeat > 1:
                        print(f"round {repeat + 1}/{args.repeat}", file=sys.stderr, flush=True)
                    for name in names:
                        found = two_class(
                            name, fleet, args, targets, batch_limit, workdir, args.seed + repeat
                        )
                        by_router[name].append(found)
                        print(format_two_class(name, found, mix_limit), flush=True)
                if args.repeat > 1:
                    for name, probes in by_router.items():
                        print(format_two_class_rounds(name, probes, mix_limit), flush=True)
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
