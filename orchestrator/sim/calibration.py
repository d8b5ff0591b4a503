"""Calibrate the fleet model on MLPerf Offline figures, then predict the Server figures.

Offline: every sample is queued at once, as LoadGen's Offline scenario issues them (enough for
600 s at the published rate plus LoadGen's 10% margin). The published figure is read as the
replica's saturated throughput: output tokens/s while requests are still queued, from 10% into
the run until the backlog clears. The drain at the end depends on how a harness orders samples,
which is not published, so it is reported but not fitted. The one free parameter per generation,
the sequence efficiency, is found by bisection so that this throughput meets the published one.

Server: Poisson arrivals for a warm-up and then 600 s measured; the predicted capacity is the
highest rate whose p99 TTFT and p99 TPOT, over the requests arriving in the measured window, stay
within the targets, by bisection on the rate with common random numbers (the same samples and
unit-rate gaps at every rate tried). Nothing is fitted to the Server figures. The warm-up is as
long as the longest request may stay in the batch within the TPOT target (10,240 tokens × 80 ms):
a batch filled from empty holds only short requests at first and reaches its steady mix of long
ones only after that, so a window measured from a cold start overstates what a replica sustains
(by 8 points on MI355X, whose 1,024-sequence batch is what binds).
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass

from orchestrator.core.generations import Generation
from orchestrator.fleet.figures import FleetFigures, LatencyTarget, load_figures
from orchestrator.fleet.step_cost import StepCostModel
from orchestrator.fleet.workload import SampleLengths, WorkloadSampler
from orchestrator.sim.batcher import SimBatcher
from orchestrator.sim.sequences import SimRequest
from orchestrator.sim.virtual import VirtualRun, percentile, run_virtual

MIN_DURATION_S = 600.0
LOADGEN_MARGIN = 1.1
WARMUP_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class OfflineResult:
    """An Offline run: saturated tokens/s (what is calibrated), whole-run tokens/s, batch."""

    saturated_tokens_per_s: float
    whole_run_tokens_per_s: float
    saturation_batch: float
    preemptions: int


@dataclass(frozen=True, slots=True)
class ServerPoint:
    """One Server-scenario run at `rate_per_s` requests/s."""

    rate_per_s: float
    tokens_per_s: float
    ttft_p99_s: float
    tpot_p99_s: float

    def meets(self, target: LatencyTarget) -> bool:
        return self.ttft_p99_s <= target.ttft_s and self.tpot_p99_s <= target.tpot_s


@dataclass(frozen=True, slots=True)
class GenerationCalibration:
    """Calibrated and predicted figures for one generation, per GPU."""

    generation: Generation
    sequence_efficiency: float
    offline: OfflineResult
    measured_offline_tokens_per_s: float | None  # the target: published, or from a published ratio
    server: ServerPoint
    measured_server_tokens_per_s: float | None
    kv_capacity_tokens: int

    @property
    def offline_error_pct(self) -> float | None:
        return _error_pct(self.offline.saturated_tokens_per_s, self.measured_offline_tokens_per_s)

    @property
    def server_error_pct(self) -> float | None:
        return _error_pct(self.server.tokens_per_s, self.measured_server_tokens_per_s)


def _error_pct(predicted: float, measured: float | None) -> float | None:
    return None if not measured else 100.0 * (predicted - measured) / measured


def offline_samples(
    figures: FleetFigures, tokens_per_s: float, *, seed: int
) -> list[SampleLengths]:
    """The Offline sample set LoadGen issues to a replica expected to run at `tokens_per_s`."""
    count = math.ceil(
        LOADGEN_MARGIN * MIN_DURATION_S * tokens_per_s / figures.workload.mean_output_tokens
    )
    return WorkloadSampler(figures.workload, seed=seed).draw_many(count)


def run_offline(cost: StepCostModel, samples: list[SampleLengths]) -> OfflineResult:
    requests = [SimRequest(s.input_tokens, s.output_tokens, 0.0) for s in samples]
    run = run_virtual(SimBatcher(cost), requests)
    start_s = WARMUP_SHARE * run.end_s
    end_s = max(run.backlog_cleared_s, start_s + 1e-9)
    return OfflineResult(
        saturated_tokens_per_s=run.throughput_between(start_s, end_s),
        whole_run_tokens_per_s=run.output_tokens / run.end_s,
        saturation_batch=_mean_tokens_per_step(run, start_s, end_s),
        preemptions=run.preemptions,
    )


def _mean_tokens_per_step(run: VirtualRun, start_s: float, end_s: float) -> float:
    """Tokens per step over a window: the running batch, give or take the prefills finishing."""
    lo = bisect.bisect_left(run.step_end_s, start_s)
    hi = bisect.bisect_right(run.step_end_s, end_s) - 1
    return 0.0 if hi <= lo else (run.tokens_out[hi] - run.tokens_out[lo]) / (hi - lo)


def server_warmup_s(figures: FleetFigures) -> float:
    """Longest stay of a request in the batch within the Server TPOT target, in seconds."""
    workload = figures.workload
    return workload.max_output_tokens * workload.server_latency_p99.tpot_s


def calibrate_sequence_efficiency(
    generation: Generation,
    target_tokens_per_s: float,
    *,
    figures: FleetFigures | None = None,
    seed: int = 0,
    tolerance: float = 0.001,
) -> float:
    """The efficiency at which simulated saturated Offline tokens/s meets the target."""
    figures = figures or load_figures()
    samples = offline_samples(figures, target_tokens_per_s, seed=seed)

    def throughput(efficiency: float) -> float:
        cost = StepCostModel.for_generation(
            generation, sequence_efficiency=efficiency, figures=figures
        )
        return run_offline(cost, samples).saturated_tokens_per_s

    low, high = 1e-3, 1.0
    if throughput(high) < target_tokens_per_s:
        raise ValueError(
            f"{generation}: {target_tokens_per_s:.0f} tokens/s is out of the model's reach even at "
            "full efficiency; the weight read alone bounds it"
        )
    while high / low - 1.0 > tolerance:
        mid = math.sqrt(low * high)
        if throughput(mid) < target_tokens_per_s:
            low = mid
        else:
            high = mid
    return math.sqrt(low * high)


class ServerScenario:
    """Poisson Server runs for one replica, with the same samples and gaps at every rate."""

    def __init__(
        self,
        cost: StepCostModel,
        *,
        max_rate_per_s: float,
        duration_s: float = MIN_DURATION_S,
        warmup_s: float | None = None,
        seed: int = 0,
    ) -> None:
        self.cost = cost
        self.duration_s = duration_s
        self.warmup_s = server_warmup_s(cost.figures) if warmup_s is None else warmup_s
        expected = math.ceil(max_rate_per_s * (self.warmup_s + duration_s) * 1.5) + 100
        self._samples = WorkloadSampler(cost.figures.workload, seed=seed).draw_many(expected)
        gaps = random.Random(seed + 1)
        self._unit_gaps = [gaps.expovariate(1.0) for _ in range(expected)]

    def arrivals(self, rate_per_s: float) -> list[SimRequest]:
        requests: list[SimRequest] = []
        now = 0.0
        end_s = self.warmup_s + self.duration_s
        for sample, gap in zip(self._samples, self._unit_gaps, strict=True):
            now += gap / rate_per_s
            if now > end_s:
                break
            requests.append(SimRequest(sample.input_tokens, sample.output_tokens, now))
        return requests

    def run(self, rate_per_s: float) -> ServerPoint:
        """Tokens/s is the scheduled rate in tokens (measured output tokens / duration)."""
        requests = self.arrivals(rate_per_s)
        run_virtual(SimBatcher(self.cost), requests)
        measured = [r for r in requests if r.arrival_s >= self.warmup_s]
        ttfts = [r.first_token_s - r.arrival_s for r in measured if r.first_token_s is not None]
        tpots = [
            (r.finish_s - r.first_token_s) / (r.output_tokens - 1)
            for r in measured
            if r.output_tokens > 1 and r.finish_s is not None and r.first_token_s is not None
        ]
        return ServerPoint(
            rate_per_s=rate_per_s,
            tokens_per_s=sum(r.output_tokens for r in measured) / self.duration_s,
            ttft_p99_s=percentile(ttfts, 99),
            tpot_p99_s=percentile(tpots, 99),
        )

    def capacity(
        self, target: LatencyTarget, *, high_rate_per_s: float, steps: int = 14
    ) -> ServerPoint:
        """Highest rate in (0, high_rate_per_s] meeting `target`, by bisection."""
        low, high = 0.0, high_rate_per_s
        best: ServerPoint | None = None
        for _ in range(steps):
            mid = (low + high) / 2
            point = self.run(mid)
            if point.meets(target):
                low, best = mid, point
            else:
                high = mid
        if best is None:
            raise ValueError(f"no rate up to {high_rate_per_s:.3f}/s meets {target}")
        return best


def calibrate_generation(
    generation: Generation,
    *,
    figures: FleetFigures | None = None,
    sequence_efficiency: float | None = None,
    seed: int = 0,
) -> GenerationCalibration:
    """Fit the efficiency where an Offline target exists (published, or a published ratio of one;
    else take the stored efficiency), then predict Server capacity, KV capacity and the batch."""
    figures = figures or load_figures()
    measured = figures.measured.get(generation)
    target = figures.offline_target_tokens_per_s(generation)
    if sequence_efficiency is None:
        if target is None:
            sequence_efficiency = figures.sequence_efficiency_of(generation)
        else:
            sequence_efficiency = calibrate_sequence_efficiency(
                generation, target, figures=figures, seed=seed
            )
    cost = StepCostModel.for_generation(
        generation, sequence_efficiency=sequence_efficiency, figures=figures
    )
    expected = target if target is not None else capacity_guess(cost)
    offline = run_offline(cost, offline_samples(figures, expected, seed=seed))
    max_rate = 1.3 * offline.saturated_tokens_per_s / figures.workload.mean_output_tokens
    scenario = ServerScenario(cost, seed=seed, max_rate_per_s=max_rate)
    server = scenario.capacity(figures.workload.server_latency_p99, high_rate_per_s=max_rate)
    return GenerationCalibration(
        generation=generation,
        sequence_efficiency=sequence_efficiency,
        offline=offline,
        measured_offline_tokens_per_s=target,
        server=server,
        measured_server_tokens_per_s=measured.server_tokens_per_s if measured else None,
        kv_capacity_tokens=cost.kv_capacity_tokens,
    )


def capacity_guess(cost: StepCostModel) -> float:
    """A quick saturated-throughput figure, to size an Offline run for an unmeasured generation.

    Four full batches of samples keep a backlog long enough to read a saturated rate off.
    """
    batch = cost.figures.engine.max_num_seqs
    samples = WorkloadSampler(cost.figures.workload, seed=0).draw_many(4 * batch)
    return run_offline(cost, samples).saturated_tokens_per_s
