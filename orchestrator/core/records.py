"""Plain records shared across layers. Frozen: a record is a fact at a moment, not a live object."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


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
