"""Plain records shared across layers. Frozen: a record is a fact at a moment, not a live object."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from orchestrator.core.generations import Generation


class EngineKind(StrEnum):
    SIM = "sim"
    VLLM = "vllm"
    SGLANG = "sglang"
    EXTERNAL = "external"


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """What an engine's `/metrics` page says about its load at one moment.

    `kv_cache_usage` is a ratio in [0, 1]. Token counters are cumulative since the engine started
    (Prometheus counters); rates come from differences between two loads. `None` means the engine
    does not export that figure.
    """

    running: int
    waiting: int
    kv_cache_usage: float
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    observed_at_s: float = 0.0


@dataclass(frozen=True, slots=True)
class LoadReport:
    """One replica's load as the one place that scrapes it last read it: a row of the routing
    table's load, streamed to routers.

    `load` is `None` while unknown: no page read yet, or the last page an adapter error (`problem`
    says which; `adapter_errors_total` counts them since the replica registered). `age_s` is how
    old the reading was when the report was made, so a receiver dates it on its own clock.
    `capacity_tokens_per_s` is the capacity estimated where the scrapes are (the same figure for
    every router); `None` before there is one.
    """

    replica_id: str
    load: ReplicaLoad | None
    age_s: float = 0.0
    capacity_tokens_per_s: float | None = None
    adapter_errors_total: int = 0
    problem: str = ""


class ReplicaState(StrEnum):
    """Where a replica is in its life, as the routing table knows it."""

    READY = "ready"
    DRAINING = "draining"  # finishes what it has, takes nothing new
    UNHEALTHY = "unhealthy"  # its engine failed its health check


class NodeHealth(StrEnum):
    """Fabric and HBM health of the node a replica runs on (from the exporters)."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"  # usable, with a capacity penalty
    UNHEALTHY = "unhealthy"  # route elsewhere


@dataclass(frozen=True, slots=True)
class Site:
    """A failure and latency domain; `rtt_s` maps other sites to the measured round trip."""

    name: str
    rtt_s: Mapping[str, float] = field(default_factory=dict)

    def rtt_to(self, other: str) -> float:
        return 0.0 if other == self.name else self.rtt_s.get(other, 0.0)


@dataclass(frozen=True, slots=True)
class Replica:
    """One engine instance as the router sees it.

    `capacity_prior_tokens_per_s` is what it is expected to sustain within the latency targets, in
    wall-clock output tokens/s (the fleet model's figure, divided by the time scale of a simulated
    engine); the router corrects it online. `static_weight` is only read by the
    `weighted-static` baseline, which exists to compare against hand-tuned weights.
    `engine_version` is what the engine says it runs ("0.10.1"; empty when it does not say), so
    learned capacity can be read per software version.
    """

    replica_id: str
    url: str
    model: str
    pool: str
    site: str
    generation: Generation
    engine: EngineKind
    capacity_prior_tokens_per_s: float
    node: str = ""
    state: ReplicaState = ReplicaState.READY
    node_health: NodeHealth = NodeHealth.HEALTHY
    static_weight: float = 1.0
    engine_version: str = ""
