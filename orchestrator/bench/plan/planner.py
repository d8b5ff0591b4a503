"""Search for the cheapest (or lowest-power) mix of GPUs that serves a demand within its SLO.

1. Every mix of the offers within their limits, the sites' limits and the power cap whose
   fleet-model capacity covers the demand with the headroom, ordered by cost (or watts), then
   by GPUs.
2. In that order, each is checked in virtual time: the real `capacity` routing profile and
   estimator over simulated replicas of the mix, Poisson arrivals at demand × (1 + headroom), a
   warm-up, then a measured window, served until the last request finishes. The first whose
   p99 TTFT and p99 TPOT (over the measured window's requests) meet the targets is
   the plan; a mix the fleet model over-rates fails here and the search moves on.
3. The plan is then run at the demand itself and at smaller and larger copies of itself, for the
   goodput (requests/s meeting both targets) against fleet size.
"""

from __future__ import annotations

import heapq
import itertools
import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from orchestrator.bench.plan.offers import Offer, PlanRequest
from orchestrator.bench.simulate.fleet_spec import build_profile
from orchestrator.bench.virtual_fleet import ReplicaSpec, VirtualFleet
from orchestrator.core.generations import Generation
from orchestrator.fleet.figures import load_figures
from orchestrator.sim.virtual import percentile

PROFILE = "capacity"
MAX_CHECKED = 8  # mixes simulated before the search gives up
SCALES = (0.5, 0.75, 0.9, 1.1, 1.25)  # copies of the plan run for the goodput curve


@dataclass(frozen=True, slots=True)
class Mix:
    """GPUs per offer, in the request's offer order."""

    offers: tuple[Offer, ...]
    counts: tuple[int, ...]

    @property
    def gpus(self) -> int:
        return sum(self.counts)

    @property
    def label(self) -> str:
        return " + ".join(
            f"{n} {o.label}" for o, n in zip(self.offers, self.counts, strict=True) if n
        )

    @property
    def watts(self) -> float:
        return sum(n * o.watts_per_gpu for o, n in zip(self.offers, self.counts, strict=True))

    @property
    def price_per_hour(self) -> float | None:
        if any(
            o.price_per_gpu_hour is None for o, n in zip(self.offers, self.counts, strict=True) if n
        ):
            return None
        return sum(
            n * (o.price_per_gpu_hour or 0.0) for o, n in zip(self.offers, self.counts, strict=True)
        )

    def scaled(self, factor: float) -> Mix:
        return Mix(self.offers, tuple(max(0, round(n * factor)) for n in self.counts))


@dataclass(frozen=True, slots=True)
class Check:
    """One mix in virtual time at `rate_per_s`; latencies over the measured window."""

    mix: Mix
    rate_per_s: float
    model_rate_per_s: float  # what the fleet model predicts the mix sustains
    ttft_p99_s: float
    tpot_p99_s: float
    goodput_per_s: float
    goodput_share: float
    passed: bool
    cpu_s: float


@dataclass(frozen=True, slots=True)
class Plan:
    """The chosen mix (None if none passed), every check made, and the goodput curve."""

    request: PlanRequest
    chosen: Check | None
    at_demand: Check | None
    checks: list[Check]
    curve: list[Check]
    candidates: int

    @property
    def model_margin(self) -> float | None:
        """Fleet-model capacity of the plan over the demand, minus one."""
        if self.chosen is None:
            return None
        return self.chosen.model_rate_per_s / self.request.requests_per_s - 1.0


def capacities(request: PlanRequest) -> Mapping[Generation, float]:
    """Per-GPU Server capacity in output tokens/s: the fleet's learned figures, or the model's."""
    model = load_figures().server_tokens_per_s
    return {
        o.generation: request.capacity_tokens_per_s.get(o.generation, model.get(o.generation, 0.0))
        for o in request.offers
    }


def model_rate_per_s(mix: Mix, request: PlanRequest) -> float:
    per_gpu = capacities(request)
    tokens = sum(n * per_gpu[o.generation] for o, n in zip(mix.offers, mix.counts, strict=True))
    return tokens / request.workload.mean_output_tokens


def _objective(mix: Mix, request: PlanRequest) -> float:
    if request.objective == "power":
        return mix.watts
    return mix.price_per_hour or 0.0


def candidate_mixes(request: PlanRequest) -> Iterator[Mix]:
    """Mixes within every limit that the fleet model says cover demand × (1 + headroom),
    cheapest first (ties: fewer GPUs)."""
    offers = tuple(request.offers)
    per_gpu = capacities(request)
    needed_tokens = (
        request.requests_per_s * (1.0 + request.headroom) * request.workload.mean_output_tokens
    )
    ranges = []
    for offer in offers:
        capacity = per_gpu[offer.generation]
        enough = math.ceil(needed_tokens / capacity) if capacity > 0 else 0
        ranges.append(range(min(offer.max_gpus, enough) + 1))
    ranked: list[tuple[float, int, tuple[int, ...]]] = []
    for counts in itertools.product(*ranges):
        tokens = sum(n * per_gpu[o.generation] for o, n in zip(offers, counts, strict=True))
        if tokens < needed_tokens or not _within_limits(offers, counts, request):
            continue
        mix = Mix(offers, counts)
        ranked.append((_objective(mix, request), mix.gpus, counts))
    heapq.heapify(ranked)
    while ranked:
        _, _, counts = heapq.heappop(ranked)
        yield Mix(offers, counts)


def _within_limits(offers: Sequence[Offer], counts: Sequence[int], request: PlanRequest) -> bool:
    by_site: dict[str, int] = {}
    for offer, n in zip(offers, counts, strict=True):
        by_site[offer.site] = by_site.get(offer.site, 0) + n
    if any(by_site.get(site, 0) > limit for site, limit in request.site_limits.items()):
        return False
    if request.power_cap_w is not None:
        watts = sum(n * o.watts_per_gpu for o, n in zip(offers, counts, strict=True))
        if watts > request.power_cap_w:
            return False
    return True


def check(
    mix: Mix, request: PlanRequest, rate_per_s: float, *, warmup_s: float, duration_s: float,
    seed: int,
) -> Check:  # fmt: skip
    """Serve `mix` at `rate_per_s` in virtual time; pass = both p99 targets met."""
    per_gpu = capacities(request)
    specs = [
        ReplicaSpec(
            f"{o.generation.value.lower()}-{o.site}-{i:04d}", o.generation,
            per_gpu[o.generation], o.site,
        )
        for o, n in zip(mix.offers, mix.counts, strict=True)
        for i in range(n)
    ]  # fmt: skip
    slo = request.slo
    model_rate = model_rate_per_s(mix, request)
    if not specs:
        return Check(mix, rate_per_s, model_rate, math.inf, math.inf, 0.0, 0.0, False, 0.0)
    fleet = VirtualFleet(
        specs, build_profile(PROFILE), target_ttft_s=slo.ttft_s, target_tpot_s=slo.tpot_s,
        record_capacity=False,
    )  # fmt: skip
    cpu = time.process_time()
    horizon_s = warmup_s + duration_s
    # Served to the end, so a long answer counts against TPOT rather than vanishing at a cut.
    run = fleet.run(request.workload.arrivals(seed, rate_per_s, horizon_s), measure_from_s=warmup_s)
    ttfts, tpots, good = [], [], 0
    for requests in run.requests.values():
        for r in requests:
            if r.arrival_s < warmup_s:
                continue
            ttft = math.inf if r.first_token_s is None else r.first_token_s - r.arrival_s
            ttfts.append(ttft)
            tpot = 0.0
            if r.output_tokens > 1:
                tpot = math.inf
                if r.finish_s is not None and r.first_token_s is not None:
                    tpot = (r.finish_s - r.first_token_s) / (r.output_tokens - 1)
                    tpots.append(tpot)
            if r.finish_s is not None and ttft <= slo.ttft_s and tpot <= slo.tpot_s:
                good += 1
    ttft_p99, tpot_p99 = percentile(ttfts, 99), percentile(tpots, 99)
    passed = bool(ttfts) and ttft_p99 <= slo.ttft_s and tpot_p99 <= slo.tpot_s
    return Check(
        mix, rate_per_s, model_rate, ttft_p99, tpot_p99, good / duration_s,
        good / len(ttfts) if ttfts else 0.0, passed, time.process_time() - cpu,
    )  # fmt: skip


def plan(
    request: PlanRequest,
    *,
    warmup_s: float = 60.0,
    duration_s: float = 180.0,
    seed: int = 0,
    curve: bool = True,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> Plan:
    """Search (see the module docstring); `curve` False skips step 3."""
    target_rate = request.requests_per_s * (1.0 + request.headroom)
    checks: list[Check] = []
    chosen: Check | None = None
    candidates = 0
    for mix in candidate_mixes(request):
        candidates += 1
        if len(checks) >= MAX_CHECKED:
            continue  # counted, not simulated
        result = check(
            mix, request, target_rate, warmup_s=warmup_s, duration_s=duration_s, seed=seed
        )
        checks.append(result)
        progress(
            f"  {mix.label}: {target_rate:.1f} req/s, p99 TTFT {result.ttft_p99_s:.2f} s, "
            f"p99 TPOT {result.tpot_p99_s * 1e3:.1f} ms, goodput {result.goodput_share:.1%} "
            f"{'pass' if result.passed else 'fail'}"
        )
        if result.passed:
            chosen = result
            break
    at_demand: Check | None = None
    points: list[Check] = []
    if chosen is not None:
        at_demand = check(
            chosen.mix, request, request.requests_per_s, warmup_s=warmup_s,
            duration_s=duration_s, seed=seed,
        )  # fmt: skip
        points.append(at_demand)
        if curve:
            for factor in SCALES:
                smaller = chosen.mix.scaled(factor)
                if smaller.gpus and smaller.counts != chosen.mix.counts:
                    progress(f"  curve: {smaller.label} at {request.requests_per_s:.1f} req/s")
                    points.append(
                        check(
                            smaller, request, request.requests_per_s, warmup_s=warmup_s,
                            duration_s=duration_s, seed=seed,
                        )
                    )  # fmt: skip
    points.sort(key=lambda c: c.mix.gpus)
    return Plan(request, chosen, at_demand, checks, points, candidates)
