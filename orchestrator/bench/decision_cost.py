"""What one routing decision costs, at a small and a large fleet: it should be nearly flat.

    python -m orchestrator.bench.decision_cost [--iterations 20000] [--repeats 5]

Each fleet is half MI300X, half MI355X (capacity priors from the fleet model), split over two
sites 150 ms apart, with a steady background load. The `capacity` profile decides for a stream of
requests (hot and cold prefixes, clients in both sites) at `--rate` decisions per simulated
second, so its 0.2 s filter cache expires as it would in service. The figure is the median over
repeats of wall-clock µs per `Profile.decide` call (one core, this process). `--reserved` puts
work with a looser TPOT target in flight too, so replicas are held for the requests' tight one
(filter `slo-reserved` narrows the primary, the fallbacks come from the rest).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.core.arg_types import positive_float, positive_int
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, Replica, Site
from orchestrator.fleet.figures import capacity_prior_tokens_per_s, load_figures
from orchestrator.routing.context import RequestContext
from orchestrator.routing.fleet_state import FleetState
from orchestrator.routing.plugin import Candidate, RoutingView
from orchestrator.routing.profile import Profile
from orchestrator.routing.profiles import DEFAULT_PROFILE, builtin_profiles
from orchestrator.table.snapshot import RoutingTable

MODEL = "openai/gpt-oss-120b"
SITES = ("kr", "us")
RTT_S = 0.150
BACKGROUND_UTILISATION = 0.5  # mean share of each replica's concurrency capacity already busy
HOT_PREFIXES = 64
LOOSER = 3.0  # `--reserved`: the looser class's TPOT target, times the requests' own


@dataclass(frozen=True, slots=True)
class CostResult:
    replicas: int
    us_per_decision: float


def build_table(replicas: int) -> RoutingTable:
    """`replicas` replicas: generations alternate MI300X/MI355X, sites alternate in pairs."""
    figures = load_figures()
    generations = (Generation.MI300X, Generation.MI355X)
    rows = []
    for index in range(replicas):
        generation = generations[index % 2]
        site = SITES[(index // 2) % 2]
        rows.append(
            Replica(
                replica_id=f"{site}-{generation.value.lower()}-{index:04d}",
                url=f"http://10.0.{index // 250}.{index % 250 + 1}:8000",
                model=MODEL,
                pool=f"{site}-{generation.value.lower()}",
                site=site,
                generation=generation,
                engine=EngineKind.SIM,
                capacity_prior_tokens_per_s=capacity_prior_tokens_per_s(figures, generation),
            )
        )
    sites = {name: Site(name, {o: RTT_S for o in SITES if o != name}) for name in SITES}
    return RoutingTable(version=1, replicas=tuple(rows), sites=sites)


def loaded_fleet(
    table: RoutingTable, target_tpot_s: float, rng: random.Random, *, reserved: bool = False
) -> tuple[FleetState, list[Candidate]]:
    """The background load; with `reserved`, requests at the target and at a looser one in flight
    (as the forwarder counts them), so that replicas are held for the target."""
    fleet = FleetState()
    fleet.sync(table)
    candidates = fleet.candidates(table)
    for candidate in candidates:
        busy = candidate.stats.concurrency_capacity(target_tpot_s) * BACKGROUND_UTILISATION
        candidate.stats.in_flight = int(busy * rng.uniform(0.5, 1.5))
    if reserved:
        for index, candidate in enumerate(candidates):
            fleet.started(candidate.replica, target_tpot_s * (1.0 if index % 4 else LOOSER))
    return fleet, candidates


def request_stream(count: int, rng: random.Random) -> list[RequestContext]:
    contexts = []
    for _ in range(count):
        roll = rng.random()
        prefix = rng.randrange(HOT_PREFIXES) if roll < 0.5 else rng.getrandbits(63)
        contexts.append(
            RequestContext(
                model=MODEL,
                prompt_tokens=rng.randint(100, 4000),
                max_tokens=rng.randint(100, 2000),
                prefix_hash=None if roll > 0.9 else prefix,
                client_site=rng.choice(SITES),
            )
        )
    return contexts


def measure(
    replicas: int,
    iterations: int,
    repeats: int,
    rate_per_s: float,
    seed: int,
    *,
    reserved: bool = False,
) -> float:
    """Median over `repeats` of µs per decision, after one untimed warm-up pass."""
    target = load_figures().workload.server_latency_p99
    rng = random.Random(seed)
    table = build_table(replicas)
    fleet, candidates = loaded_fleet(table, target.tpot_s, rng, reserved=reserved)
    contexts = request_stream(iterations, rng)
    views = [
        RoutingView(table, target.ttft_s, target.tpot_s, i / rate_per_s, fleet.reservation)
        for i in range(iterations)
    ]
    profile: Profile = builtin_profiles()[DEFAULT_PROFILE]
    samples = []
    for repeat in range(repeats + 1):
        started = time.perf_counter()
        for ctx, view in zip(contexts, views, strict=True):
            profile.decide(ctx, view, candidates)
        if repeat > 0:
            samples.append((time.perf_counter() - started) / iterations * 1e6)
    return statistics.median(samples)


def format_results(results: Sequence[CostResult]) -> str:
    lines = [f"{'replicas':>8}  {'µs/decision':>11}"]
    lines += [f"{r.replicas:>8}  {r.us_per_decision:>11.1f}" for r in results]
    first, last = results[0], results[-1]
    ratio = last.us_per_decision / first.us_per_decision
    lines.append(f"ratio {last.replicas}/{first.replicas}: {ratio:.2f}×")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--iterations", type=positive_int, default=20000, help="decisions per repeat"
    )
    parser.add_argument(
        "--repeats", type=positive_int, default=5, help="timed repeats (median reported)"
    )
    parser.add_argument(
        "--rate", type=positive_float, default=2000.0, help="decisions per simulated second"
    )
    parser.add_argument("--small", type=positive_int, default=8, help="replicas in the small fleet")
    parser.add_argument(
        "--large", type=positive_int, default=512, help="replicas in the large fleet"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--reserved",
        action="store_true",
        help="a looser class in flight too: replicas are held for the requests' target",
    )
    args = parser.parse_args(argv)
    if args.iterations < 1 or args.repeats < 1 or args.rate <= 0:
        parser.error("--iterations and --repeats must be at least 1, --rate positive")
    results = [
        CostResult(
            size,
            measure(
                size, args.iterations, args.repeats, args.rate, args.seed, reserved=args.reserved
            ),
        )
        for size in (args.small, args.large)
    ]
    print(format_results(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
