"""How evenly several routers spread one model's requests over equal replicas, in process.

    python -m orchestrator.bench.router_spread [--split 34,17,9,4] [--replicas 8] [--in-flight 64]
        [--hold 2] [--fixed-hold] [--seconds 60] [--seeds 10]

Each router is a real `FleetState` on a shared manual clock. Requests arrive at each router as
a Poisson stream (its share of `--in-flight` / `--hold` per second), go to a replica of least
outstanding (its own in flight plus `others_in_flight`, ties drawn) and hold it for an
exponential time of mean `--hold` (`--fixed-hold`: exactly that). Each replica's engine count is
scraped once a second at its own phase and reaches every router 0.2 s later, in batches every
0.1 s, as the control plane streams them. The figure is the coefficient of variation of the
replicas' counts, sampled every 0.25 s after 5 s, averaged over the run and over `--seeds`;
beside it the same routers balancing only their own requests (no reports) and one router with
all the traffic. `bench/fleet_scale.py` measures the live routers in `wrk`'s closed loop.
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
from collections.abc import Callable, Sequence
from typing import cast

from orchestrator.core.arg_types import positive_float, positive_int, positive_ints
from orchestrator.core.clock import ManualClock
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, Replica, ReplicaLoad
from orchestrator.fleet.figures import capacity_prior_tokens_per_s, load_figures
from orchestrator.routing.fleet_state import FleetState
from orchestrator.table.snapshot import RoutingTable

MODEL = "openai/gpt-oss-120b"
SCRAPE_PERIOD_S = 1.0
REPORT_DELAY_S = 0.2
BATCH_S = 0.1
SAMPLE_EVERY_S = 0.25
WARMUP_S = 5.0


def _table(count: int) -> RoutingTable:
    figures = load_figures()
    prior = capacity_prior_tokens_per_s(figures, Generation.MI355X)
    replicas = tuple(
        Replica(
            replica_id=f"r{index}",
            url=f"http://r{index}:8000",
            model=MODEL,
            pool="us-mi355x",
            site="us",
            generation=Generation.MI355X,
            engine=EngineKind.SIM,
            capacity_prior_tokens_per_s=prior,
        )
        for index in range(count)
    )
    return RoutingTable(version=1, replicas=replicas, sites={})


def spread_cv(
    split: Sequence[int],
    *,
    replicas: int,
    hold_s: float,
    seconds: float,
    seed: int,
    reports: bool = True,
    fixed_hold: bool = False,
) -> float:
    """Mean CV of the replicas' counts with routers whose mean in flight is `split`."""
    rng = random.Random(seed)
    clock = ManualClock()
    table = _table(replicas)
    by_id = {r.replica_id: r for r in table.replicas}
    ids = list(by_id)
    fleets = [FleetState(clock=clock.now) for _ in split]
    for fleet in fleets:
        fleet.sync(table)
    counts = dict.fromkeys(ids, 0)
    events: list[tuple[float, int, str, object]] = []
    order = 0

    def push(at_s: float, kind: str, data: object) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (at_s, order, kind, data))

    def hold() -> float:
        return hold_s if fixed_hold else rng.expovariate(1.0 / hold_s)

    rates = [share / hold_s for share in split]
    for router, rate in enumerate(rates):
        push(rng.expovariate(rate), "arrive", router)
    if reports:
        for replica_id in ids:
            push(rng.uniform(0.0, SCRAPE_PERIOD_S), "scrape", replica_id)
        push(BATCH_S, "batch", None)
    push(WARMUP_S, "sample", None)
    pending: list[tuple[str, ReplicaLoad]] = []  # scraped, delivered with the next batch
    cvs: list[float] = []
    while events:
        at_s, _, kind, data = heapq.heappop(events)
        if at_s > seconds:
            break
        clock.set(at_s)
        if kind == "arrive":
            router = cast(int, data)
            fleet = fleets[router]
            outstanding = {i: _outstanding(fleet, i) for i in ids}
            least = min(outstanding.values())
            target = rng.choice([i for i in ids if outstanding[i] - least < 1e-9])
            fleet.started(by_id[target])
            counts[target] += 1
            push(at_s + hold(), "finish", (router, target, at_s))
            push(at_s + rng.expovariate(rates[router]), "arrive", router)
        elif kind == "finish":
            router, target, started_s = cast(tuple[int, str, float], data)
            fleets[router].finished(
                by_id[target], ok=True, output_tokens=1, tpot_s=None, started_s=started_s
            )
            counts[target] -= 1
        elif kind == "scrape":
            replica_id = str(data)
            load = ReplicaLoad(counts[replica_id], 0, 0.1, observed_at_s=at_s)
            push(at_s + REPORT_DELAY_S, "deliver", (replica_id, load))
            push(at_s + SCRAPE_PERIOD_S, "scrape", replica_id)
        elif kind == "deliver":
            pending.append(cast(tuple[str, ReplicaLoad], data))
        elif kind == "batch":
            for fleet in fleets:
                for replica_id, load in pending:
                    fleet.reported(replica_id, load, now_s=at_s)
                fleet.reports_taken(at_s)
            pending = []
            push(at_s + BATCH_S, "batch", None)
        else:
            values = list(counts.values())
            mean = statistics.fmean(values)
            if mean > 0:
                cvs.append(statistics.pstdev(values) / mean)
            push(at_s + SAMPLE_EVERY_S, "sample", None)
    return statistics.fmean(cvs)


def _outstanding(fleet: FleetState, replica_id: str) -> float:
    stats = fleet.stats(replica_id)
    assert stats is not None
    return stats.in_flight + stats.others_in_flight()


def mean_over_seeds(run: Callable[[int], float], seeds: int) -> tuple[float, float]:
    """(mean, max − min) over `seeds` seeds."""
    values = [run(seed) for seed in range(seeds)]
    return statistics.fmean(values), max(values) - min(values)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", type=positive_ints, default=(34, 17, 9, 4),
                        help="each router's mean requests in flight")  # fmt: skip
    parser.add_argument("--replicas", type=positive_int, default=8)
    parser.add_argument("--hold", type=positive_float, default=2.0, help="mean seconds held")
    parser.add_argument("--fixed-hold", action="store_true", help="every request held --hold")
    parser.add_argument("--seconds", type=positive_float, default=60.0)
    parser.add_argument("--seeds", type=positive_int, default=10)
    args = parser.parse_args(argv)
    if args.seconds <= WARMUP_S + SAMPLE_EVERY_S:
        parser.error(f"--seconds must be over {WARMUP_S + SAMPLE_EVERY_S:g}: the first "
                     f"{WARMUP_S:g} s are not sampled")  # fmt: skip
    split = list(args.split)

    def run(routers: Sequence[int], reports: bool) -> tuple[float, float]:
        return mean_over_seeds(
            lambda seed: spread_cv(
                routers, replicas=args.replicas, hold_s=args.hold, seconds=args.seconds,
                seed=seed, reports=reports, fixed_hold=args.fixed_hold,
            ),
            args.seeds,
        )  # fmt: skip

    hold = f"held {args.hold:g} s" if args.fixed_hold else f"held {args.hold:g} s on average"
    print(f"{sum(split)} requests in flight on average over {args.replicas} equal replicas, "
          f"{hold}; CV of the replicas' counts, mean of {args.seeds} seeds "
          "[max - min]:")  # fmt: skip
    rows = [
        ("one router", run([sum(split)], reports=True)),
        (f"{len(split)} routers, own requests only", run(split, reports=False)),
        (f"{len(split)} routers, with load reports", run(split, reports=True)),
    ]
    for name, (mean, spread) in rows:
        print(f"  {name:<36} {mean:.3f} [{spread:.3f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
