"""Typed view of `data/calibration.yaml`: model shape, workload statistics, engine defaults, and the
published figures the model is calibrated to.

The document is validated as it is read (pydantic, over these dataclasses and the file's own
layout): a number of the wrong kind, a missing key or one no record has is refused with its path
(`model.layers`, `measured.MI355X.offline_tokens_per_s`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from orchestrator.core.errors import OrchestratorError
from orchestrator.core.generations import GENERATIONS, Generation, parse_generation
from orchestrator.core.strict_yaml import load_strict_yaml

CALIBRATION_FILE: Final = "calibration.yaml"
# Each record refuses a key it has no field for; numbers are converted from YAML 1.1's strings
# (it reads `116.83e9` as one), but a fractional number is not taken for an int.
_RECORD: Final = ConfigDict(extra="forbid")


def _frozen(mapping: Mapping[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(dict(mapping))


FrozenFloats = Annotated[Mapping[str, float], AfterValidator(_frozen)]


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
    kv_heads: int
    head_dim: int
    max_context_tokens: int
    weights_bytes: FrozenFloats
    kv_bytes_per_token: float
    non_expert_weight_bytes_per_param: float

    __pydantic_config__ = _RECORD

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

    __pydantic_config__ = _RECORD


@dataclass(frozen=True, slots=True)
class ReasoningStats:
    """How gpt-oss splits its output between reasoning and answer, by reasoning effort.

    The workload's output lengths were measured at `effort`; a request at another effort keeps
    its answer and scales its reasoning by `effort_factor[effort] / effort_factor[self.effort]`.
    Reasoning tokens are output tokens: they cost decode steps and KV like any other.
    """

    effort: str
    share_at_low: float
    effort_factor: FrozenFloats

    __pydantic_config__ = _RECORD

    def __post_init__(self) -> None:
        factors = dict(self.effort_factor)
        if self.effort not in factors:
            raise ValueError(f"effort {self.effort!r} has no effort_factor (it has {factors})")
        if not 0.0 <= self.share_at_low < 1.0 or min(factors.values()) <= 0:
            raise ValueError(f"share_at_low must be in [0, 1) and factors > 0, got {factors}")


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

    __pydantic_config__ = _RECORD


@dataclass(frozen=True, slots=True)
class EngineDefaults:
    """Scheduler limits and memory settings a replica runs with."""

    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    hbm_bandwidth_efficiency: float

    __pydantic_config__ = _RECORD


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


class FiguresError(ValueError):
    """The calibration document is not what the fleet model needs; the message names each
    offending key by its path."""


def _generation(raw: object) -> Generation:
    try:
        return parse_generation(str(raw))
    except OrchestratorError as error:
        raise ValueError(error.message) from None


GenerationKey = Annotated[Generation, BeforeValidator(_generation)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _MeasuredRow(_Section):
    """One generation's published figures for a whole node."""

    offline_tokens_per_s: Positive
    server_tokens_per_s: Positive


class _RelativeRow(_Section):
    reference: GenerationKey
    offline_ratio: Annotated[float, Field(gt=0, le=2)]


class _Calibrated(_Section):
    sequence_efficiency: dict[GenerationKey, Positive]
    server_tokens_per_s: dict[GenerationKey, float] = {}


class _Document(_Section):
    """`calibration.yaml` as written: `measured` holds `gpus_per_node` beside the generations'
    rows (split off before validation)."""

    model: ModelShape
    workload: WorkloadStats
    engine: EngineDefaults
    gpus_per_node: Annotated[int, Field(ge=1)]
    measured: dict[GenerationKey, _MeasuredRow]
    relative: dict[GenerationKey, _RelativeRow] = {}
    calibrated: _Calibrated


def parse_figures(raw: Mapping[str, Any]) -> FleetFigures:
    """Build typed figures from the YAML mapping; `FiguresError` names every key that is missing,
    unknown or of the wrong kind, by its path."""
    document = dict(raw) if isinstance(raw, Mapping) else {}
    measured = document.get("measured")
    if isinstance(measured, Mapping):
        rows = dict(measured)
        if "gpus_per_node" in rows:
            document["gpus_per_node"] = rows.pop("gpus_per_node")
        document["measured"] = rows
    try:
        parsed = _Document.model_validate(document)
    except ValidationError as error:
        raise FiguresError(_problems(error)) from None
    gpus = parsed.gpus_per_node
    per_gpu = {
        generation: MeasuredFigures(
            offline_tokens_per_s=row.offline_tokens_per_s / gpus,
            server_tokens_per_s=row.server_tokens_per_s / gpus,
        )
        for generation, row in parsed.measured.items()
    }
    relative: dict[Generation, RelativeFigure] = {}
    for generation, rel in parsed.relative.items():
        if rel.reference not in per_gpu or generation in per_gpu:
            raise FiguresError(
                f"relative.{generation.value}: the reference must have measured figures and "
                f"{generation.value} none"
            )
        relative[generation] = RelativeFigure(rel.reference, rel.offline_ratio)
    return FleetFigures(
        model=parsed.model,
        workload=parsed.workload,
        engine=parsed.engine,
        measured=MappingProxyType(per_gpu),
        sequence_efficiency=MappingProxyType(dict(parsed.calibrated.sequence_efficiency)),
        server_tokens_per_s=MappingProxyType(dict(parsed.calibrated.server_tokens_per_s)),
        relative=MappingProxyType(relative),
    )


def _problems(error: ValidationError) -> str:
    """Every problem on one line each, as `path: what`; a key no record has says so."""
    lines = []
    for problem in error.errors():
        location = [str(part) for part in problem["loc"] if part != "[key]"]
        if location[:1] == ["gpus_per_node"]:
            location = ["measured", *location]
        path = ".".join(location) or "calibration"
        unknown = problem["type"] in ("extra_forbidden", "unexpected_keyword_argument")
        lines.append(f"{path}: {'unknown key' if unknown else problem['msg']}")
    return "; ".join(lines)


def calibration_path() -> Path:
    return Path(str(resources.files("orchestrator.fleet") / "data" / CALIBRATION_FILE))


@cache
def load_figures() -> FleetFigures:
    """The figures shipped with the package (read once, on first use, not at import)."""
    return parse_figures(load_strict_yaml(calibration_path().read_text()))
