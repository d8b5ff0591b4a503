"""A routing table from a replicas file: the simplest source, for a fixed fleet.

    apiVersion: orchestrator/v1alpha1
    kind: Replicas
    model: openai/gpt-oss-120b
    sites:
      kr: {rttMs: {us: 150}}
      us: {rttMs: {kr: 150}}
    replicas:
      - {id: kr-mi300x-0, url: "http://10.0.0.5:8000", pool: kr-mi300x, site: kr,
         generation: MI300X, engine: vllm}
      - {id: us-mi355x-0, url: "http://10.1.0.7:8000", pool: us-mi355x, site: us,
         generation: MI355X, engine: sim, timeScale: 10}

A replica's capacity prior is the fleet model's predicted Server capacity for its generation,
divided by `timeScale` for a slowed-down simulated engine; `capacityTokensPerS` overrides it.
An optional top-level `slo:` section states the latency targets (`config/slo.py`); the router's
`--ttft`, `--tpot` and `--class-slo` flags override its fleet-wide values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchestrator.config.slo import SloSpec
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.generations import Generation, parse_generation
from orchestrator.core.records import EngineKind, Replica, ReplicaState, Site
from orchestrator.core.slo import SloTargets
from orchestrator.core.strict_yaml import DuplicateKeyError, load_strict_yaml
from orchestrator.fleet.figures import capacity_prior_tokens_per_s, load_figures
from orchestrator.table.snapshot import RoutingTable


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class SiteEntry(_Strict):
    rtt_ms: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict, alias="rttMs")


class ReplicaEntry(_Strict):
    id: Annotated[str, Field(min_length=1)]
    url: Annotated[str, Field(pattern=r"^https?://[^\s/]+(:\d+)?/?$")]
    pool: Annotated[str, Field(min_length=1)]
    site: Annotated[str, Field(min_length=1)]
    generation: Generation
    engine: EngineKind = EngineKind.EXTERNAL
    model: str | None = None
    node: str = ""
    time_scale: Annotated[float, Field(gt=0)] = Field(1.0, alias="timeScale")
    capacity_tokens_per_s: Annotated[float, Field(gt=0)] | None = Field(
        None, alias="capacityTokensPerS"
    )
    weight: Annotated[float, Field(gt=0)] = 1.0
    state: ReplicaState = ReplicaState.READY

    @field_validator("generation", mode="before")
    @classmethod
    def _any_spelling(cls, value: object) -> object:
        return parse_generation(value) if isinstance(value, str) else value


class ReplicasFile(_Strict):
    api_version: Literal["orchestrator/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["Replicas"]
    model: Annotated[str, Field(min_length=1)]
    sites: dict[str, SiteEntry] = Field(default_factory=dict)
    replicas: list[ReplicaEntry]
    slo: SloSpec = Field(default_factory=SloSpec)

    @model_validator(mode="after")
    def _consistent(self) -> ReplicasFile:
        ids = [r.id for r in self.replicas]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate replica ids: {', '.join(duplicates)}")
        if self.sites:
            unknown = sorted({r.site for r in self.replicas} - set(self.sites))
            if unknown:
                raise ValueError(f"replicas name sites not under `sites`: {', '.join(unknown)}")
        return self


def _error_text(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])


def _validated(text: str, source: str) -> ReplicasFile:
    try:
        raw = load_strict_yaml(text)
        spec = ReplicasFile.model_validate(raw)
    except DuplicateKeyError as error:
        raise OrchestratorError(ErrorCode.INVALID_ARGUMENT, f"{source}: {error}") from None
    except yaml.YAMLError as error:
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT, f"{source}: not YAML: {error}"
        ) from None
    except ValidationError as error:
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT, f"{source}: {_error_text(error)}"
        ) from None
    return spec


def parse_replicas(text: str, *, source: str = "replicas file", version: int = 1) -> RoutingTable:
    """Validate a replicas document and build a routing table; errors name the field."""
    spec = _validated(text, source)
    figures = load_figures()
    replicas = tuple(
        Replica(
            replica_id=entry.id,
            url=entry.url.rstrip("/"),
            model=entry.model or spec.model,
            pool=entry.pool,
            site=entry.site,
            generation=entry.generation,
            engine=entry.engine,
            capacity_prior_tokens_per_s=entry.capacity_tokens_per_s
            or capacity_prior_tokens_per_s(figures, entry.generation) / entry.time_scale,
            node=entry.node,
            state=entry.state,
            static_weight=entry.weight,
        )
        for entry in spec.replicas
    )
    sites = {
        name: Site(name, {other: ms / 1000.0 for other, ms in entry.rtt_ms.items()})
        for name, entry in spec.sites.items()
    }
    return RoutingTable(version=version, replicas=replicas, sites=sites)


def parse_replicas_slo(text: str, *, source: str = "replicas file") -> SloTargets:
    """The latency targets of a replicas document (MLPerf's when it has no `slo:`)."""
    return _validated(text, source).slo.targets()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT, f"cannot read replicas file {path}: {error.strerror}"
        ) from None


def load_replicas_file(path: Path) -> RoutingTable:
    return parse_replicas(_read(path), source=str(path))


def load_replicas_slo(path: Path) -> SloTargets:
    return parse_replicas_slo(_read(path), source=str(path))
