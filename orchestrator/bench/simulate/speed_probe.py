"""One timed Server run in virtual time, as a script, so `speed` can run it on another tree too.

    PYTHONPATH=<tree> python speed_probe.py REPLICAS MINUTES SEED [LOAD]

Imports `orchestrator` from whichever tree PYTHONPATH names and uses only what every tree since
the virtual fleet has (`VirtualFleet`, `UnitStream`, the fleet spec helpers): N MI355X replicas
behind the `capacity` profile, Poisson arrivals at the fleet model's Server rate (times LOAD,
default 1: below about 0.9 the fleet keeps up, so what it holds stops growing) for MINUTES
simulated minutes, served until 30 s after the last arrival. Prints one JSON line: wall and CPU
seconds of the run, peak resident memory, and digests of every routing pick and of the results
(per-replica output tokens, the TTFT and TPOT values' bucket counts, the step count), so two
trees that decide alike print equal digests.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import resource
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orchestrator
from orchestrator.bench.simulate import samples
from orchestrator.bench.simulate.fleet_spec import (
    FleetSpec,
    PoolSpec,
    Prior,
    build_profile,
    replica_specs,
)
from orchestrator.bench.simulate.scenarios import LatencyLimits, fleet_model_rate_per_s
from orchestrator.bench.virtual_fleet import Arrival, VirtualFleet
from orchestrator.core.generations import Generation

TAIL_S = 30.0  # served after the last arrival: 10 × the TTFT limit, as the Server probe cuts


class RecordingProfile:
    """The real profile, with each decision's primary folded into a digest."""

    def __init__(self, profile: Any) -> None:
        self._profile = profile
        self._digest = hashlib.blake2b(digest_size=16)
        self.decisions = 0

    def decide(self, ctx: Any, view: Any, candidates: Any) -> Any:
        decision = self._profile.decide(ctx, view, candidates)
        self._digest.update(decision.primary.replica_id.encode())
        self.decisions += 1
        return decision

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def _arrivals(seed: int, rate_per_s: float, duration_s: float) -> Iterable[Arrival]:
    # Trees before `stream_arrivals` draw the same requests into a list first.
    stream = getattr(samples, "stream_arrivals", None)
    if stream is not None:
        return stream(seed, rate_per_s, duration_s)  # type: ignore[no-any-return]
    return samples.UnitStream(seed).arrivals(rate_per_s, duration_s)


def _latency_record_type() -> Any:
    """This file's own tree's `LatencyRecord`, whichever tree PYTHONPATH names: its digest of a
    baseline's latency list is then made as the current tree makes its own."""
    path = Path(__file__).resolve().parents[2] / "sim" / "latency_record.py"
    spec = importlib.util.spec_from_file_location("_probe_latency_record", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LatencyRecord


def _latencies_digest(values: Any) -> str:
    """Trees since the bounded record digest their own; older ones kept each value."""
    if hasattr(values, "digest"):
        return str(values.digest())
    return str(_latency_record_type().of(values).digest())


def probe(replicas: int, minutes: float, seed: int, load: float = 1.0) -> dict[str, Any]:
    specs = replica_specs(FleetSpec((PoolSpec(Generation.MI355X, replicas),)), Prior.CALIBRATED)
    limits = LatencyLimits.server()
    profile = RecordingProfile(build_profile("capacity"))
    fleet = VirtualFleet(
        specs, profile,
        target_ttft_s=limits.ttft_s, target_tpot_s=limits.tpot_s,
        keep_requests=False, record_capacity=False,
    )  # fmt: skip
    duration_s = minutes * 60.0
    rate = fleet_model_rate_per_s(specs) * load
    rss_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cpu, wall = time.process_time(), time.perf_counter()
    run = fleet.run(_arrivals(seed, rate, duration_s), until_s=duration_s + TAIL_S)
    cpu_s, wall_s = time.process_time() - cpu, time.perf_counter() - wall
    tokens = ",".join(f"{k}={v}" for k, v in sorted(run.output_tokens.items()))
    results = hashlib.blake2b(
        f"{tokens}|{run.steps}|{_latencies_digest(run.ttfts_s)}|{_latencies_digest(run.tpots_s)}".encode(),
        digest_size=16,
    )
    return {
        "replicas": replicas,
        "minutes": minutes,
        "load": load,
        "requests": profile.decisions,
        "steps": run.steps,
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "rss_before_run_bytes": rss_before_kib * 1024,
        "picks_digest": profile.hexdigest(),
        "results_digest": results.hexdigest(),
        # compiled, pure, or why compiled modules ran from source (trees before the build: pure)
        "build": getattr(orchestrator, "BUILD", "pure"),
    }


def main(argv: Sequence[str]) -> int:
    replicas, minutes, seed = int(argv[0]), float(argv[1]), int(argv[2])
    load = float(argv[3]) if len(argv) > 3 else 1.0
    if not load > 0:
        raise SystemExit(f"LOAD must be above 0, got {argv[3]!r}")
    print(json.dumps(probe(replicas, minutes, seed, load)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
