"""Where the embedded stack listens, and the ready banner `orchestrator up` prints."""

from __future__ import annotations

import json
from dataclasses import dataclass

from orchestrator.config.schema import OrchestratorConfig
from orchestrator.controlplane.admin_client import Status


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Where the stack listens once up; `exporters` are (simulated node, scrape URL) pairs, known
    once the fabric runs."""

    host: str
    http_port: int
    grpc_port: int
    metrics_port: int
    control_plane: str
    exporters: tuple[tuple[str, str], ...] = ()
    prometheus: str = ""


def banner(
    config: OrchestratorConfig,
    endpoints: Endpoints,
    status: Status,
    elapsed_s: float,
    session_dir: str | None,
) -> str:
    """The ready banner: where to send requests, what serves them, and a request to try."""
    base = f"http://{endpoints.host}:{endpoints.http_port}"
    capacity: dict[str, float] = {}
    for replica in status.replicas:
        capacity.setdefault(replica.pool, replica.capacity_tokens_per_s)
    pools = [
        f"    {p.name:<14} {p.site:<4} {p.generation:<7} {p.engine:<6} "
        f"{p.ready}/{'-' if p.desired is None else p.desired} ready"
        f"  ~{capacity.get(p.name, 0):.0f} tok/s per replica"
        for p in status.pools
    ]
    request = json.dumps(
        {
            "model": config.model,
            "messages": [{"role": "user", "content": "Hello!"}],
            "max_tokens": 32,
        }
    )
    return "\n".join(
        [
            f"orchestrator is up ({elapsed_s:.1f} s)",
            f"  OpenAI API      {base}/v1  (model {config.model})",
            f"  gRPC inference  {endpoints.host}:{endpoints.grpc_port}",
            f"  control plane   {endpoints.control_plane}  (orchestrator status)",
            f"  metrics         http://127.0.0.1:{endpoints.metrics_port}/metrics",
            f"  Ray session     {session_dir}",
            *(
                f"  exporter        {url}  (node {node}; orchestrator fault --help)"
                for node, url in endpoints.exporters
            ),
            *(
                [f"  prometheus      {endpoints.prometheus}  (rules loaded; Grafana: dashboards/)"]
                if endpoints.prometheus
                else []
            ),
            "  pools:",
            *pools,
            "  try:",
            f"    curl -s {base}/v1/chat/completions -H 'Content-Type: application/json' \\",
            f"      -d '{request}'",
            "  Ctrl-C stops everything.",
        ]
    )
