"""Typed view of `data/calibration.yaml`: model shape, workload statistics, engine defaults, and the
published figures the model is calibrated to."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import yaml

from orchestrator.core.generations import GENERATIONS, Generation, parse_generation

CALIBRATION_FILE: Final = "calibration.yaml"


@dataclass(frozen=True, slots=True)
class ModelShape:
    """GPT-OSS-120B's shape: what decides bytes read and FLOPs per step."""

    name: str
    total_params: float
    active_params: float
    full_attention_layers: int
    sliding_attention_layers: int
    sliding_window_tokens: int
    experts: int
    experts_per_token: int
    layers: int
    hidden_size: int
    expert_intermediate_size: int
    query_heads: int
    head_dim: int
    max_context_tokens: int
    weights_bytes: Mapping[str, float]
    kv_bytes_per_token: float
    non_expert_weight_bytes_per_param: float

    @property
    def expert_params(self) -> float:
        """Parameters in all experts: gate, up and down projections per expert per layer."""
        per_expert = 3 * self.hidden_size * self.expert_intermediate_size
        return per_expert * self.experts * self.layers

    def non_expert_bytes(self) -> float:
        return (self.total_params - self.expert_params) * self.non_expert_weight_bytes_per_param

    def expert_bytes(self, weight_format: str) -> float:
        return self.weights_bytes[weight_format] - self.non_expert_bytes()

    @property
    def sliding_kv_tokens_per_sequence(self) -> float:
        """Sliding-window KV of one sequence, in full-attention token equivalents."""
        return (
            self.sliding_window_tokens * self.sliding_attention_layers / self.full_attention_layers
        )


@dataclass(frozen=True, slots=True)
class LatencyTarget:
    ttft_s: float
    tpot_s: float


@dataclass(frozen=True, slots=True)
class ReasoningStats:
    """How gpt-oss splits its output between reasoning and answer, by reasoning effort.

    The workload's output lengths were measured at `effort`; a request at another effort keeps
    its answer and scales its reasoning by `effort_factor[effort] / effort_factor[self.effort]`.
    Reasoning tokens are output tokens: they cost decode steps and KV like any other.
    """

    effort: str
    share_at_low: float
    effort_factor: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class WorkloadStats:
    """Token-length statistics of the MLPerf gpt-oss-120b performance set."""

    samples: int
    mean_input_tokens: float
    mean_output_tokens: float
    max_input_tokens: int
    max_output_tokens: int
    input_sigma: float
    output_sigma: float
    server_latency_p99: LatencyTarget
    interactive_latency_p99: LatencyTarget
    reasoning: ReasoningStats


@dataclass(frozen=True, slots=True)
class EngineDefaults:
    """Scheduler limits and memory settings a replica runs with."""

    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    hbm_bandwidth_efficiency: float


@dataclass(frozen=True, slots=True)
class MeasuredFigures:
    """Published per-GPU tokens/s (the node figure divided by its GPUs)."""

    offline_tokens_per_s: float
    server_tokens_per_s: float


@dataclass(frozen=True, slots=True)
class RelativeFigure:
    """A published performance ratio to a measured generation, for one without its own MLPerf row.

    The generation is calibrated on `ratio` × the reference's Offline figure instead of borrowing
    its architecture's efficiency (which, on a roofline dominated by HBM reads, would make it as
    fast as the reference whatever its clocks and power).
    """

    reference: Generation
    ratio: float


@dataclass(frozen=True, slots=True)
class FleetFigures:
    model: ModelShape
    workload: WorkloadStats
    engine: EngineDefaults
    measured: Mapping[Generation, MeasuredFigures]
    sequence_efficiency: Mapping[Generation, float]
    server_tokens_per_s: Mapping[Generation, float]
    relative: Mapping[Generation, RelativeFigure] = field(
        default_factory=lambda: MappingProxyType({})
    )

    def offline_target_tokens_per_s(self, generation: Generation) -> float | None:
        """Per-GPU Offline tokens/s to calibrate on: published, or a published ratio of one."""
        if generation in self.measured:
            return self.measured[generation].offline_tokens_per_s
        relative = self.relative.get(generation)
        if relative is None:
            return None
        return relative.ratio * self.measured[relative.reference].offline_tokens_per_s

    def sequence_efficiency_of(self, generation: Generation) -> float:
        """Calibrated prefill efficiency; an uncalibrated generation borrows its architecture's."""
        if generation in self.sequence_efficiency:
            return self.sequence_efficiency[generation]
        architecture = GENERATIONS[generation].architecture
        for other, value in self.sequence_efficiency.items():
            if GENERATIONS[other].architecture == architecture:
                return value
        raise KeyError(f"no calibrated compute efficiency for {generation} or its architecture")


def capacity_prior_tokens_per_s(figures: FleetFigures, generation: Generation) -> float:
    """Predicted Server capacity of one replica (one GPU), output tokens/s: the router's prior."""
    value = figures.server_tokens_per_s.get(generation, 0.0)
    if value <= 0:
        raise KeyError(
            f"no predicted capacity for {generation}; run `orchestrator fleet calibrate --write`"
        )
    return value


def _coerce(record: type[Any], raw: Mapping[str, Any]) -> dict[str, Any]:
    """Keep the record's fields and turn numbers to their declared type.

    YAML 1.1 reads `116.83e9` as a string, so numbers are converted here rather than trusted.
    """
    types = {field.name: str(field.type) for field in dataclasses.fields(record)}
    out: dict[str, Any] = {}
    for name, kind in types.items():
        value = raw[name]
        out[name] = int(value) if kind == "int" else float(value) if kind == "float" else value
    return out


def _target(raw: Mapping[str, Any]) -> LatencyTarget:
    return LatencyTarget(ttft_s=float(raw["ttft_s"]), tpot_s=float(raw["tpot_s"]))


def _reasoning(raw: Mapping[str, Any]) -> ReasoningStats:
    factors = {str(k): float(v) for k, v in raw["effort_factor"].items()}
    effort = str(raw["effort"])
    share = float(raw["share_at_low"])
    if effort not in factors or not 0.0 <= share < 1.0 or min(factors.values()) <= 0:
        raise ValueError(f"workload.reasoning: bad effort {effort!r}, share or factors {factors}")
    return ReasoningStats(effort, share, MappingProxyType(factors))


def parse_figures(raw: Mapping[str, Any]) -> FleetFigures:
    """Build typed figures from the YAML mapping; a missing key raises KeyError naming it."""
    model = dict(raw["model"])
    model["weights_bytes"] = MappingProxyType(
        {k: float(v) for k, v in model["weights_bytes"].items()}
    )
    shape = ModelShape(**_coerce(ModelShape, model))
    workload = dict(raw["workload"])
    stats = WorkloadStats(
        samples=int(workload["samples"]),
        mean_input_tokens=float(workload["mean_input_tokens"]),
        mean_output_tokens=float(workload["mean_output_tokens"]),
        max_input_tokens=int(workload["max_input_tokens"]),
        max_output_tokens=int(workload["max_output_tokens"]),
        input_sigma=float(workload["input_sigma"]),
        output_sigma=float(workload["output_sigma"]),
        server_latency_p99=_target(workload["server_latency_p99"]),
        interactive_latency_p99=_target(workload["interactive_latency_p99"]),
        reasoning=_reasoning(workload["reasoning"]),
    )
    engine = EngineDefaults(**_coerce(EngineDefaults, raw["engine"]))
    measured_raw = dict(raw["measured"])
    gpus = float(measured_raw.pop("gpus_per_node"))
    measured = {
        parse_generation(name): MeasuredFigures(
            offline_tokens_per_s=float(row["offline_tokens_per_s"]) / gpus,
            server_tokens_per_s=float(row["server_tokens_per_s"]) / gpus,
        )
        for name, row in measured_raw.items()
    }
    efficiency = {
        parse_generation(name): float(value)
        for name, value in raw["calibrated"]["sequence_efficiency"].items()
    }
    capacity = {
        parse_generation(name): float(value)
        for name, value in raw["calibrated"].get("server_tokens_per_s", {}).items()
    }
    relative: dict[Generation, RelativeFigure] = {}
    for name, row in (raw.get("relative") or {}).items():
        generation = parse_generation(name)
        reference = parse_generation(str(row["reference"]))
        ratio = float(row["offline_ratio"])
        if reference not in measured or generation in measured:
            raise ValueError(
                f"relative.{name}: the reference must have measured figures and {name} none"
            )
        if not 0.0 < ratio <= 2.0:
            raise ValueError(
                f"relative.{name}.offline_ratio: expected a ratio in (0, 2], got {ratio}"
            )
        relative[generation] = RelativeFigure(reference, ratio)
    return FleetFigures(
        model=shape,
        workload=stats,
        engine=engine,
        measured=MappingProxyType(measured),
        sequence_efficiency=MappingProxyType(efficiency),
        server_tokens_per_s=MappingProxyType(capacity),
        relative=MappingProxyType(relative),
    )


def calibration_path() -> Path:
    return Path(str(resources.files("orchestrator.fleet") / "data" / CALIBRATION_FILE))


@cache
def load_figures() -> FleetFigures:
    """The figures shipped with the package (read once, on first use, not at import)."""
    return parse_figures(yaml.safe_load(calibration_path().read_text()))
