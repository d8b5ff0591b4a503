"""A host too busy to run the engine loses the stall's excess and counts it; short stalls are
caught up and count nothing."""

from __future__ import annotations

import asyncio
import time

import pytest

from orchestrator.core.generations import Generation
from orchestrator.fleet.step_cost import StepCostModel
from orchestrator.sim.batcher import SimBatcher
from orchestrator.sim.live import MAX_CATCH_UP_S, LiveEngine


async def run_with_stall(stall_s: float) -> float:
    engine = LiveEngine(
        SimBatcher(StepCostModel.for_generation(Generation.MI355X)),
        model_name="m",
        time_scale=1.0,
    )
    await engine.start()
    try:
        request = engine.submit(100, 100_000, "length")
        while engine.batcher.generated_tokens(request) < 3:
            await asyncio.sleep(0.005)
        time.sleep(stall_s)  # the whole loop is held, as a starved host holds it
        before = engine.batcher.generated_tokens(request)
        while engine.batcher.generated_tokens(request) < before + 3:
            await asyncio.sleep(0.005)
        return engine.metrics.behind_seconds
    finally:
        await engine.stop()


def test_a_long_stall_counts_what_it_could_not_catch_up() -> None:
    stall_s = MAX_CATCH_UP_S + 0.4
    behind = asyncio.run(run_with_stall(stall_s))
    assert behind == pytest.approx(stall_s - MAX_CATCH_UP_S, abs=0.1)


def test_a_stall_shorter_than_the_catch_up_bound_counts_nothing() -> None:
    assert asyncio.run(run_with_stall(MAX_CATCH_UP_S / 3)) == 0.0


def test_the_counter_is_on_the_metrics_page() -> None:
    engine = LiveEngine(SimBatcher(StepCostModel.for_generation(Generation.MI300X)), model_name="m")
    engine.metrics.behind_seconds = 1.5
    samples = {
        sample.name: sample.value
        for family in engine.metrics.collect()
        for sample in family.samples
    }
    assert samples["orchestrator_sim_behind_seconds_total"] == 1.5
