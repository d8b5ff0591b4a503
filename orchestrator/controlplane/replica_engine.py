"""How a replica actor runs its engine: the simulator in its event loop, real engines as children.

Both give a base URL once started and stop cleanly; waiting for health and scraping load are the
actor's job, the same for every engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind
from orchestrator.engines import LaunchCommand, LaunchSpec, adapter_for
from orchestrator.sim.replica import ReplicaSettings, running_replica

_STOP_GRACE_S = 10.0


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """One replica's engine: what to serve, where, and how (a pool's settings, resolved).

    An empty `host` means the address of the node the replica runs on, known only once it runs.
    """

    engine: EngineKind
    model: str
    generation: Generation
    host: str
    time_scale: float | None = None
    extra_args: tuple[str, ...] = ()
    gpu_indices: tuple[int, ...] = (0,)


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """A real engine's process as it is started: its argv and its whole environment."""

    argv: tuple[str, ...]
    environment: dict[str, str]


class RunningEngine(Protocol):
    async def start(self) -> str:
        """Start the engine; returns its base URL (it may not answer `/health` yet)."""
        ...

    async def stop(self) -> None: ...

    def exit_code(self) -> int | None:
        """The engine's exit code once it has exited by itself; `None` while it runs."""
        ...


class InProcessSimEngine:
    """The simulated engine served inside the caller's event loop, on a port the OS picks."""

    def __init__(self, spec: EngineSpec) -> None:
        self._settings = ReplicaSettings(
            spec.generation,
            model_name=spec.model,
            time_scale=1.0 if spec.time_scale is None else spec.time_scale,
        )
        self._host = spec.host
        self._stack = contextlib.AsyncExitStack()

    async def start(self) -> str:
        return await self._stack.enter_async_context(
            running_replica(self._settings, host=self._host, port=0)
        )

    async def stop(self) -> None:
        await self._stack.aclose()

    def exit_code(self) -> int | None:
        return None  # it lives and dies with the actor's own process


class SubprocessEngine:
    """A real engine (vLLM, SGLang) started from its adapter's `LaunchCommand`, ROCm env and all."""

    def __init__(self, spec: EngineSpec) -> None:
        self._spec = spec
        self._process: asyncio.subprocess.Process | None = None

    def command(self, port: int) -> LaunchCommand:
        spec = self._spec
        return adapter_for(spec.engine).launch_command(
            LaunchSpec(
                model=spec.model,
                host=spec.host,
                port=port,
                generation=spec.generation,
                gpu_indices=spec.gpu_indices,
                extra_args=spec.extra_args,
                time_scale=spec.time_scale,
            )
        )

    def plan(self, port: int) -> LaunchPlan:
        command = self.command(port)
        return LaunchPlan(command.argv, child_environment(os.environ, command))

    async def start(self) -> str:
        port = free_port(self._spec.host)
        plan = self.plan(port)
        self._process = await asyncio.create_subprocess_exec(*plan.argv, env=plan.environment)
        return f"http://{self._spec.host}:{port}"

    def exit_code(self) -> int | None:
        return self._process.returncode if self._process is not None else None

    async def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), _STOP_GRACE_S)
        except TimeoutError:
            process.kill()
            await process.wait()


def child_environment(inherited: Mapping[str, str], command: LaunchCommand) -> dict[str, str]:
    """The engine's environment: the actor's, with the adapter's on top, GPU lists made coherent.

    The adapter names the GPUs in `HIP_VISIBLE_DEVICES` as node ordinals (the ids Ray assigned).
    An inherited `ROCR_VISIBLE_DEVICES` would filter first and renumber them, so it is dropped;
    `CUDA_VISIBLE_DEVICES` is set to the same list, which vLLM on ROCm requires to agree.
    """
    environment = {**inherited, **command.env}
    devices = command.env.get("HIP_VISIBLE_DEVICES")
    if devices is not None:
        environment.pop("ROCR_VISIBLE_DEVICES", None)
        environment["CUDA_VISIBLE_DEVICES"] = devices
    return environment


def engine_for(spec: EngineSpec) -> RunningEngine:
    if spec.engine is EngineKind.SIM:
        return InProcessSimEngine(spec)
    return SubprocessEngine(spec)


def free_port(host: str) -> int:
    """A port free now on `host`; the engine binds it a moment later (engines take no port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port
