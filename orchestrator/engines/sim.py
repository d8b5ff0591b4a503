"""The simulated engine (`orchestrator.sim`), started as `python -m orchestrator sim serve`.

It speaks vLLM's metric names, so it shares vLLM's table rather than keeping a copy.
"""

from __future__ import annotations

import sys
from typing import ClassVar

from orchestrator.core.records import EngineKind, ReplicaLoad
from orchestrator.engines import vllm
from orchestrator.engines.base import LaunchCommand, LaunchSpec, MetricNames, version_from_json
from orchestrator.engines.metrics import parse_replica_load


class SimAdapter:
    """A simulated replica in its own interpreter process; it needs no GPU and no environment."""

    kind: ClassVar[EngineKind] = EngineKind.SIM
    health_path: ClassVar[str] = "/health"
    version_path: ClassVar[str] = "/version"
    metric_names: ClassVar[MetricNames] = vllm.METRIC_NAMES

    def launch_command(self, spec: LaunchSpec) -> LaunchCommand:
        """Runs under this interpreter, so the child sees the same installed `orchestrator`."""
        time_scale = () if spec.time_scale is None else ("--time-scale", str(spec.time_scale))
        argv = (
            sys.executable, "-m", "orchestrator", "sim", "serve",
            "--generation", spec.generation.value,
            "--host", spec.host,
            "--port", str(spec.port),
            *time_scale,
            *spec.extra_args,
        )  # fmt: skip
        return LaunchCommand(argv, {})

    def parse_version(self, body: str) -> str:
        return version_from_json(body)

    def parse_load(self, exposition_text: str, now_s: float) -> ReplicaLoad:
        return parse_replica_load(exposition_text, self.metric_names, now_s)
