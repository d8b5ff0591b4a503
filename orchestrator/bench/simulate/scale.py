"""Scale: 512 MI355X replicas in virtual time, efficiency from 8 to 512, decision cost.

    python -m orchestrator.bench.simulate.scale [--replicas 512] [--minutes 10]
        [--sizes 8,32,72,128,512] [--efficiency-minutes 2] [--json]

1. Efficiency at each size: the Server search (p99 TTFT ≤ 3 s, p99 TPOT ≤ 80 ms) on N MI355X
   replicas behind the `capacity` profile, started at N/8 × the 8-replica rate; scale
   efficiency = rate(N) ÷ (N/8 × rate(8)), the share of linear scaling kept.
2. The timed run: `--replicas` replicas under `--minutes` simulated minutes of Server load at
   the fleet model's Server capacity per replica (the calibrated MLPerf Server figure, in
   requests/s), without stopping early; wall time and this process's CPU time, both printed
   (the machine may be shared: CPU time is the one-core figure). `--no-timed` skips it.
3. Decision cost: µs per `capacity` decision at 8 and at `--replicas` replicas (decision_cost).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from orchestrator.bench import decision_cost
from orchestrator.bench.simulate.fleet_spec import FleetSpec, PoolSpec, Prior, replica_specs
from orchestrator.bench.simulate.scenarios import (
    ServerProbe,
    ServerSettings,
    fleet_model_rate_per_s,
    probe_server,
    search_server,
)
from orchestrator.bench.virtual_fleet import ReplicaSpec
from orchestrator.core.arg_types import positive_float, positive_int, positive_ints
from orchestrator.core.generations import Generation

PROFILE = "capacity"
BASE_SIZE = 8
SCALE_PRECISION = 0.02


@dataclass(frozen=True, slots=True)
class SizePoint:
    replicas: int
    rate_per_s: float
    tokens_per_s: float
    efficiency: float


@dataclass(frozen=True, slots=True)
class TimedRun:
    replicas: int
    simulated_s: float
    requests: int
    wall_s: float
    cpu_s: float
    ttft_p99_s: float
    tpot_p99_s: float
    passed: bool


@dataclass(frozen=True, slots=True)
class ScaleResult:
    points: list[SizePoint]
    timed: TimedRun | None
    decision_us: dict[int, float]


def _specs(replicas: int) -> list[ReplicaSpec]:
    return replica_specs(FleetSpec((PoolSpec(Generation.MI355X, replicas),)), Prior.CALIBRATED)


def _show(replicas: int) -> Callable[[ServerProbe], None]:
    def show(probe: ServerProbe) -> None:
        verdict = "pass" if probe.passed else "fail"
        print(
            f"  {replicas:>4} replicas: {probe.rate_per_s:9.1f} req/s  p99 TTFT "
            f"{probe.ttft_p99_s:6.2f} s  p99 TPOT {probe.tpot_p99_s * 1e3:5.1f} ms  {verdict}  "
            f"({probe.cpu_s:.0f} CPU s)",
            file=sys.stderr, flush=True,
        )  # fmt: skip

    return show


def efficiency_by_size(sizes: Sequence[int], minutes: float, seed: int) -> list[SizePoint]:
    settings = ServerSettings(warmup_s=60.0, duration_s=minutes * 60.0, seed=seed)
    base_rate: float | None = None
    points = []
    for size in sizes:
        specs = _specs(size)
        start = (
            base_rate * size / BASE_SIZE
            if base_rate is not None
            else 13.0 * size  # a guess only: the search brackets from here
        )
        search = search_server(
            specs, PROFILE, settings, start_rate_per_s=start,
            on_probe=_show(size),
            precision=SCALE_PRECISION,
        )  # fmt: skip
        best = search.best
        rate = best.rate_per_s if best is not None else 0.0
        if base_rate is None:
            base_rate = rate * BASE_SIZE / size
        linear = base_rate * size / BASE_SIZE
        points.append(SizePoint(size, rate, search.tokens_per_s, rate / linear if linear else 0.0))
    return points


def timed_run(replicas: int, minutes: float, rate_per_replica: float, seed: int) -> TimedRun:
    settings = ServerSettings(warmup_s=0.0, duration_s=minutes * 60.0, seed=seed)
    print(
        f"timed run: {replicas} replicas, {minutes:g} simulated minutes at "
        f"{rate_per_replica * replicas:,.0f} req/s ...",
        file=sys.stderr, flush=True,
    )  # fmt: skip
    probe = probe_server(
        _specs(replicas), PROFILE, rate_per_replica * replicas, settings,
        stop_when_overloaded=False,
    )  # fmt: skip
    return TimedRun(
        replicas=replicas, simulated_s=settings.duration_s, requests=probe.measured,
        wall_s=probe.wall_s, cpu_s=probe.cpu_s, ttft_p99_s=probe.ttft_p99_s,
        tpot_p99_s=probe.tpot_p99_s, passed=probe.passed,
    )  # fmt: skip


def format_result(result: ScaleResult) -> str:
    lines = [f"{'replicas':>8}  {'req/s':>9}  {'tokens/s':>12}  {'scale efficiency':>16}"]
    for p in result.points:
        lines.append(
            f"{p.replicas:>8}  {p.rate_per_s:>9.1f}  {p.tokens_per_s:>12,.0f}  "
            f"{p.efficiency:>15.1%}"
        )
    if result.timed is not None:
        t = result.timed
        lines.append(
            f"timed: {t.replicas} MI355X, {t.simulated_s / 60:g} simulated min, {t.requests:,} "
            f"requests: {t.wall_s:.0f} s wall, {t.cpu_s:.0f} s CPU (one core); p99 TTFT "
            f"{t.ttft_p99_s:.2f} s, p99 TPOT {t.tpot_p99_s * 1e3:.1f} ms, "
            f"{'within' if t.passed else 'OUTSIDE'} the limits"
        )
    if result.decision_us:
        sizes = sorted(result.decision_us)
        small, large = result.decision_us[sizes[0]], result.decision_us[sizes[-1]]
        lines.append(
            f"decision cost: {small:.1f} µs at {sizes[0]}, {large:.1f} µs at {sizes[-1]} "
            f"({large / small:.2f}×)"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--replicas", type=positive_int, default=512, help="replicas in the timed run"
    )
    parser.add_argument(
        "--minutes", type=positive_float, default=10.0, help="simulated minutes, timed run"
    )
    parser.add_argument(
        "--sizes",
        type=positive_ints,
        default=(8, 32, 72, 128, 512),
        help="fleet sizes for efficiency",
    )
    parser.add_argument(
        "--efficiency-minutes", type=positive_float, default=2.0,
        help="measured simulated minutes per search probe (after 1 min of warm-up)",
    )  # fmt: skip
    parser.add_argument("--no-timed", action="store_true", help="skip the timed run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    sizes = list(args.sizes)
    started = time.perf_counter()
    points = efficiency_by_size(sizes, args.efficiency_minutes, args.seed)
    per_replica = fleet_model_rate_per_s(_specs(1))
    timed = (
        None if args.no_timed else timed_run(args.replicas, args.minutes, per_replica, args.seed)
    )
    decision = {n: decision_cost.measure(n, 5000, 3, 2000.0, args.seed) for n in (8, args.replicas)}
    result = ScaleResult(points, timed, decision)
    if args.json:
        print(json.dumps(asdict(result), indent=2))
    else:
        print(format_result(result))
        print(f"({time.perf_counter() - started:.0f} s wall in all)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
