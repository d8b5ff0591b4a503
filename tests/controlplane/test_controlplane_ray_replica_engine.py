"""The engines a replica actor runs: the simulator in-process, vLLM/SGLang from their adapters."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from orchestrator.controlplane.replica_engine import (
    EngineSpec,
    InProcessSimEngine,
    SubprocessEngine,
    engine_for,
)
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind

MODEL = "openai/gpt-oss-120b"


def test_a_simulated_engine_serves_in_the_callers_loop_and_stops_cleanly() -> None:
    async def scenario() -> tuple[int, int]:
        engine = engine_for(EngineSpec(EngineKind.SIM, MODEL, Generation.MI355X, "127.0.0.1", 0.0))
        assert isinstance(engine, InProcessSimEngine)
        url = await engine.start()
        async with aiohttp.ClientSession() as session:
            async with session.get(url + "/health") as health:
                health_status = health.status
            await engine.stop()
            try:
                async with session.get(url + "/health") as after:
                    return health_status, after.status
            except aiohttp.ClientConnectionError:
                return health_status, 0

    assert asyncio.run(scenario()) == (200, 0)


def test_vllm_runs_as_a_child_with_the_rocm_environment_and_its_pools_engine_args() -> None:
    engine = engine_for(
        EngineSpec(
            EngineKind.VLLM,
            MODEL,
            Generation.MI300X,
            "10.0.0.7",
            extra_args=("--max-num-seqs", "256"),
            gpu_indices=(2, 3),
        )
    )
    assert isinstance(engine, SubprocessEngine)
    command = engine.command(8123)
    assert command.argv[:3] == ("vllm", "serve", MODEL)
    assert command.argv[-2:] == ("--max-num-seqs", "256")
    assert "--tensor-parallel-size" in command.argv
    assert command.argv[command.argv.index("--port") + 1] == "8123"
    assert command.env["HIP_VISIBLE_DEVICES"] == "2,3"
    assert command.env["VLLM_ROCM_USE_AITER"] == "1"


def test_sglang_runs_as_a_child_from_its_adapters_command() -> None:
    engine = engine_for(EngineSpec(EngineKind.SGLANG, MODEL, Generation.MI355X, "10.0.0.7"))
    assert isinstance(engine, SubprocessEngine)
    argv = engine.command(30000).argv
    assert "30000" in argv
    assert MODEL in argv


def test_an_engine_run_as_a_child_process_serves_and_is_gone_after_stop() -> None:
    async def scenario() -> None:
        # The simulator's own launch command stands in for vLLM: same path, no GPU needed.
        engine = SubprocessEngine(
            EngineSpec(EngineKind.SIM, MODEL, Generation.MI300X, "127.0.0.1", 0.0)
        )
        url = await engine.start()
        async with aiohttp.ClientSession() as session:
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                assert engine.exit_code() is None
                try:
                    async with session.get(url + "/health") as health:
                        if health.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                assert asyncio.get_running_loop().time() < deadline, "no /health within 30 s"
                await asyncio.sleep(0.2)
            await engine.stop()
            with pytest.raises(aiohttp.ClientConnectionError):
                async with session.get(url + "/health"):
                    pass

    asyncio.run(scenario())
