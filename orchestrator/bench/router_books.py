"""What a router following a control plane spends per request besides the network, at a small
and a large fleet, in this process: where the live bench's 512-replica CPU per request grows.

    python -m orchestrator.bench.router_books [--replicas 8,128,512] [--requests 20000]
        [--rate 5000] [--repeats 3]

A `RouterService` over `decision_cost`'s fleet (half MI300X, half MI355X, two sites), run on a
manual clock at `--rate` requests per simulated second, 32 in flight (as `fleet_scale`'s `wrk`):
each request is decided (`capacity` profile, `decision_cost`'s request mix), started and
finished in the fleet state; the admission's room for every class is read every
`CAPACITY_TTL_S` of simulated time (as the admission controller reads it); and the control
plane's load reports arrive in ten batches a second, each replica once a second (`apply_loads`),
with the engine's count at this router's in-flight, read as it arrives (a router alone: others
0). The figure is
CPU µs (this process's user + system) per request for each part and in all, the median over
repeats; a part whose cost is per second, not per request (room, reports), is divided by the
requests of that second.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.admission.controller import CAPACITY_TTL_S
from orchestrator.bench.decision_cost import MODEL, build_table, request_stream
from orchestrator.core.arg_types import positive_float, positive_int, positive_ints
from orchestrator.core.clock import ManualClock
from orchestrator.core.records import LoadReport, Replica, ReplicaLoad
from orchestrator.router_service import RouterService
from orchestrator.routing.plugin import RoutingView
from orchestrator.routing.profiles import DEFAULT_PROFILE, builtin_profiles
from orchestrator.table.source import TableHolder

IN_FLIGHT = 32
REPORT_BATCHES_PER_S = 10
PARTS = ("decide", "books", "room", "reports")


@dataclass(frozen=True, slots=True)
class BooksResult:
    replicas: int
    us_per_request: dict[str, float]  # by part, and "total"


def run_once(replicas: int, requests: int, rate_per_s: float, seed: int) -> dict[str, float]:
    """CPU µs per request of each part over `requests` requests (one pass, after a second of
    requests untimed)."""
    rng = random.Random(seed)
    table = build_table(replicas)
    clock = ManualClock(1000.0)
    service = RouterService(
        TableHolder(table), builtin_profiles()[DEFAULT_PROFILE], clock=clock,
        scrape_replicas=False,
    )  # fmt: skip
    service.profile.reseed(seed)
    fleet, profile = service.fleet, service.profile
    slo = service.slo
    classes = [name for model, name, _ in slo.rows() if model == "*"]
    target = slo.target(MODEL, classes[0])
    warm = round(rate_per_s)  # a second untimed: every replica reported once, gauges made
    contexts = request_stream(warm + requests, rng)
    step_s = 1.0 / rate_per_s
    report_every_s = 1.0 / REPORT_BATCHES_PER_S
    share = max(1, -(-replicas // REPORT_BATCHES_PER_S))
    replica_list = list(table.replicas)
    spent = dict.fromkeys(PARTS, 0.0)
    cpu = time.process_time
    in_flight: deque[tuple[Replica, float]] = deque()
    next_room_s = next_report_s = clock.now()
    batch = 0
    for index, ctx in enumerate(contexts):
        if index == warm:
            spent = dict.fromkeys(PARTS, 0.0)
        clock.advance(step_s)
        now_s = clock.now()
        if now_s >= next_room_s:
            started = cpu()
            for slo_class in classes:
                service.room_of(MODEL, slo_class)
            spent["room"] += cpu() - started
            next_room_s = now_s + CAPACITY_TTL_S
        if now_s >= next_report_s:
            rows = replica_list[batch * share : (batch + 1) * share]
            batch = (batch + 1) % REPORT_BATCHES_PER_S
            reports = []
            for replica in rows:
                stats = fleet.stats(replica.replica_id)
                running = stats.in_flight if stats is not None else 0
                load = ReplicaLoad(running, 0, 0.3, observed_at_s=now_s)
                reports.append(LoadReport(replica.replica_id, load))
            started = cpu()
            service.apply_loads(reports)
            spent["reports"] += cpu() - started
            next_report_s = now_s + report_every_s
        started = cpu()
        view = RoutingView(table, target.ttft_s, target.tpot_s, now_s, fleet.reservation)
        decision = profile.decide(ctx, view, fleet.candidates(table))
        decided = cpu()
        if len(in_flight) >= IN_FLIGHT:
            replica, sent_s = in_flight.popleft()
            fleet.finished(
                replica, ok=True, output_tokens=100, tpot_s=target.tpot_s / 2,
                target_tpot_s=target.tpot_s, started_s=sent_s,
            )  # fmt: skip
        fleet.started(decision.primary, target.tpot_s)
        in_flight.append((decision.primary, now_s))
        ended = cpu()
        spent["decide"] += decided - started
        spent["books"] += ended - decided
    out = {part: seconds / requests * 1e6 for part, seconds in spent.items()}
    out["total"] = sum(out.values())
    return out


def measure(
    replicas: int, requests: int, rate_per_s: float, repeats: int, seed: int
) -> BooksResult:
    """Medians over `repeats` passes of each part's µs per request."""
    runs = [run_once(replicas, requests, rate_per_s, seed) for _ in range(repeats)]
    return BooksResult(replicas, {k: statistics.median(r[k] for r in runs) for k in runs[0]})


def format_results(results: Sequence[BooksResult]) -> str:
    columns = (*PARTS, "total")
    lines = [f"{'replicas':>8}  " + "  ".join(f"{c:>8}" for c in columns)]
    for r in results:
        lines.append(
            f"{r.replicas:>8}  " + "  ".join(f"{r.us_per_request[c]:>8.2f}" for c in columns)
        )
    first, last = results[0], results[-1]
    ratio = last.us_per_request["total"] / first.us_per_request["total"]
    lines.append(f"CPU µs per request; total {last.replicas}/{first.replicas}: {ratio:.2f}×")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--replicas", type=positive_ints, default=(8, 128, 512))
    parser.add_argument("--requests", type=positive_int, default=20000, help="per repeat")
    parser.add_argument(
        "--rate", type=positive_float, default=5000.0, help="requests per simulated second"
    )
    parser.add_argument("--repeats", type=positive_int, default=3, help="median reported")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    results = [
        measure(size, args.requests, args.rate, args.repeats, args.seed) for size in args.replicas
    ]
    print(format_results(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
