"""How fast virtual time runs: one replica's Server scenario, simulated minutes per CPU second.

    python -m orchestrator.bench.virtual_speed [--minutes 10] [--generation MI355X ...]

Each replica is driven at its published MLPerf Server rate (per GPU) with Poisson arrivals and
the workload's token lengths; the figure is CPU seconds (this process, one core) per run.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.core.arg_types import from_parser, positive_float
from orchestrator.core.generations import Generation, parse_generation
from orchestrator.fleet.figures import load_figures
from orchestrator.fleet.step_cost import StepCostModel
from orchestrator.fleet.workload import WorkloadSampler
from orchestrator.sim.batcher import SimBatcher
from orchestrator.sim.sequences import SimRequest
from orchestrator.sim.virtual import percentile, run_virtual


@dataclass(frozen=True, slots=True)
class SpeedResult:
    generation: Generation
    simulated_s: float
    requests: int
    steps: int
    cpu_s: float
    wall_s: float
    ttft_p99_s: float
    tpot_p99_s: float


def server_arrivals(generation: Generation, duration_s: float, seed: int) -> list[SimRequest]:
    figures = load_figures()
    rate = figures.measured[generation].server_tokens_per_s / figures.workload.mean_output_tokens
    sampler = WorkloadSampler(figures.workload, seed=seed)
    gaps = random.Random(seed + 1)
    requests, now = [], 0.0
    while (now := now + gaps.expovariate(rate)) < duration_s:
        sample = sampler.draw()
        requests.append(SimRequest(sample.input_tokens, sample.output_tokens, now))
    return requests


def measure(generation: Generation, minutes: float, seed: int = 0) -> SpeedResult:
    arrivals = server_arrivals(generation, minutes * 60.0, seed)
    batcher = SimBatcher(StepCostModel.for_generation(generation))
    cpu, wall = time.process_time(), time.perf_counter()
    run = run_virtual(batcher, arrivals)
    return SpeedResult(
        generation=generation,
        simulated_s=run.end_s,
        requests=len(arrivals),
        steps=run.steps,
        cpu_s=time.process_time() - cpu,
        wall_s=time.perf_counter() - wall,
        ttft_p99_s=percentile(run.ttfts_s(), 99),
        tpot_p99_s=percentile(run.tpots_s(), 99),
    )


def format_results(results: Sequence[SpeedResult]) -> str:
    lines = [
        f"{'generation':>10}  {'simulated':>10}  {'requests':>8}  {'steps':>7}  {'CPU s':>7}  "
        f"{'sim s / CPU s':>13}  {'p99 TTFT':>8}  {'p99 TPOT':>8}"
    ]
    for r in results:
        lines.append(
            f"{r.generation.value:>10}  {r.simulated_s:>9.0f}s  {r.requests:>8}  {r.steps:>7}  "
            f"{r.cpu_s:>7.2f}  {r.simulated_s / max(r.cpu_s, 1e-9):>13.0f}  "
            f"{r.ttft_p99_s:>7.2f}s  {r.tpot_p99_s * 1000:>6.1f}ms"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--minutes", type=positive_float, default=10.0, help="simulated minutes of load"
    )
    parser.add_argument(
        "--generation", type=from_parser(parse_generation), action="append",
        help="generation to run (repeatable; default MI300X and MI355X)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    generations = args.generation or [Generation.MI300X, Generation.MI355X]
    print(format_results([measure(g, args.minutes, args.seed) for g in generations]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
