"""A replica that already runs elsewhere (another site's vLLM or SGLang): scraped, never started."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from orchestrator.core.records import EngineKind, ReplicaLoad
from orchestrator.engines import vllm
from orchestrator.engines.base import LaunchCommand, LaunchSpec, MetricNames, version_from_json
from orchestrator.engines.errors import NotLaunchableError
from orchestrator.engines.metrics import parse_replica_load


@dataclass(frozen=True, slots=True)
class ExternalAdapter:
    """Scrapes a replica it did not start.

    `metric_names` is the table of the engine the replica runs: vLLM's by default,
    `sglang.METRIC_NAMES` for SGLang servers; `version_path` likewise vLLM's (`/get_server_info`
    for SGLang, whose page states the version under the same key).
    """

    metric_names: MetricNames = vllm.METRIC_NAMES
    health_path: str = "/health"
    version_path: str = "/version"
    kind: ClassVar[EngineKind] = EngineKind.EXTERNAL

    def launch_command(self, spec: LaunchSpec) -> LaunchCommand:
        raise NotLaunchableError(
            f"external replicas are not launched by us: {spec.host}:{spec.port} must already be"
            " running; register its endpoint instead"
        )

    def parse_version(self, body: str) -> str:
        return version_from_json(body)

    def parse_load(self, exposition_text: str, now_s: float) -> ReplicaLoad:
        return parse_replica_load(exposition_text, self.metric_names, now_s)
