"""What every engine adapter offers: how to start a replica, where its health is, its load.

An adapter is pure: it builds a command and parses text. Starting the process and scraping the page
are the caller's job (the replica actor), so adapters are tested without GPUs or sockets.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from orchestrator.core.generations import Generation, parse_generation
from orchestrator.core.records import EngineKind, ReplicaLoad

_MAX_PORT = 65535
_VERSION = re.compile(r"\d+(\.\d+){1,3}([.+-]\w+)*")


def version_tuple(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: "0.10.1rc1" -> (0, 10, 1)."""
    found = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(part) for part in found.group(0).split(".")) if found else ()


_MAX_VERSION_CHARS = 64


def version_from_json(body: str, key: str = "version") -> str:
    """The engine version a JSON info page states under `key` (vLLM's `/version`, SGLang's
    `/get_server_info`); raises ValueError when the page is not JSON or has no such string."""
    try:
        document = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the version page is not JSON: {exc.msg}") from None
    version = document.get(key) if isinstance(document, dict) else None
    if not isinstance(version, str) or not version.strip():
        raise ValueError(f"the version page has no {key!r} string")
    return version.strip()[:_MAX_VERSION_CHARS]


@dataclass(frozen=True, slots=True)
class Series:
    """One Prometheus sample name as it appears on the page (counters with their `_total`),
    optionally narrowed to the samples whose labels include `labels`."""

    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # computed once: a page's parse looks each series up a few dozen times
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))
        object.__setattr__(self, "_hash", hash((self.name, tuple(sorted(self.labels.items())))))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[Series], tuple[str, dict[str, str]]]:
        """Rebuilt from name and labels: a string's hash differs between processes."""
        return (Series, (self.name, dict(self.labels)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Series):
            return NotImplemented
        return self.name == other.name and dict(self.labels) == dict(other.labels)

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.labels.items())

    def spelled(self) -> str:
        """PromQL-style: `sglang:realtime_tokens_total{mode="decode"}`."""
        if not self.labels:
            return self.name
        inner = ",".join(f'{key}="{value}"' for key, value in sorted(self.labels.items()))
        return f"{self.name}{{{inner}}}"


@dataclass(frozen=True, slots=True)
class MetricNames:
    """The series an engine's page holds the figures of `ReplicaLoad` in.

    A figure may be the sum of several series (SGLang's prompt tokens: computed plus cached).
    `kv_cache_usage` must name a gauge holding a ratio in [0, 1]. `running`, `waiting`,
    `kv_cache_usage` and `generation_tokens` are required: a page without them is an adapter error,
    not an idle replica; `prompt_tokens` may be absent (the estimator then keeps its prior
    prompt/output ratio). `replicated_labels` name labels whose values split one engine into ranks
    that each report the same figure (tensor- and pipeline-parallel ranks), so they count once.
    """

    running: tuple[Series, ...]
    waiting: tuple[Series, ...]
    kv_cache_usage: Series
    generation_tokens: tuple[Series, ...]
    prompt_tokens: tuple[Series, ...] = ()
    replicated_labels: frozenset[str] = frozenset()

    def required_series(self) -> tuple[Series, ...]:
        return (*self.running, *self.waiting, self.kv_cache_usage, *self.generation_tokens)

    def all_series(self) -> tuple[Series, ...]:
        return (*self.required_series(), *self.prompt_tokens)

    def sample_names(self) -> frozenset[str]:
        return frozenset(series.name for series in self.all_series())


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """What one replica needs to start.

    `gpu_indices` are the host's GPU ordinals the replica may use (one GPU per GPT-OSS-120B replica
    by default); engines that shard use one tensor-parallel rank per GPU. `extra_args` go last on
    the command line, so they override the adapter's defaults (argparse keeps the last value).
    `time_scale` stretches the simulated engine's time (2.0 = twice as slow, 0 = no delay); `None`
    keeps the simulator's own default. Real engines ignore it. `engine_version` ("0.10.1") picks
    the launch recipe of that engine version where recipes differ; None: the current recipe.
    """

    model: str
    host: str
    port: int
    generation: Generation
    gpu_indices: tuple[int, ...] = (0,)
    extra_args: tuple[str, ...] = ()
    time_scale: float | None = None
    engine_version: str | None = None

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("model must be a non-empty model name, e.g. 'openai/gpt-oss-120b'")
        if not self.host:
            raise ValueError("host must be a non-empty host name or address")
        if not 0 < self.port <= _MAX_PORT:
            raise ValueError(f"port must be in 1..{_MAX_PORT}, got {self.port}")
        if not isinstance(self.generation, Generation):
            object.__setattr__(self, "generation", parse_generation(str(self.generation)))
        object.__setattr__(self, "gpu_indices", tuple(self.gpu_indices))
        object.__setattr__(self, "extra_args", tuple(self.extra_args))
        if not self.gpu_indices:
            raise ValueError("gpu_indices must name at least one GPU")
        if any(index < 0 for index in self.gpu_indices):
            raise ValueError(f"gpu_indices must be non-negative, got {self.gpu_indices}")
        if len(set(self.gpu_indices)) != len(self.gpu_indices):
            raise ValueError(f"gpu_indices must not repeat a GPU, got {self.gpu_indices}")
        if self.engine_version is not None and not _VERSION.fullmatch(self.engine_version):
            raise ValueError(
                f"engine_version must look like 0.17 or 0.10.1, got {self.engine_version!r}"
            )
        if self.time_scale is not None and not self.time_scale >= 0:
            raise ValueError(f"time_scale must be >= 0 (0 = no delay), got {self.time_scale}")

    @property
    def visible_devices(self) -> str:
        """The GPU list as ROCm's `HIP_VISIBLE_DEVICES` spells it: "0" or "2,3"."""
        return ",".join(str(index) for index in self.gpu_indices)


@dataclass(frozen=True, slots=True)
class LaunchCommand:
    """A process to start: `argv[0]` is the program.

    `env` holds only the variables to set on top of the parent's environment, never a whole
    environment; it is copied into a read-only mapping.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))


class EngineAdapter(Protocol):
    """One engine kind, seen from the orchestrator."""

    @property
    def kind(self) -> EngineKind: ...

    @property
    def health_path(self) -> str:
        """HTTP path that answers 200 once the replica serves requests."""
        ...

    @property
    def metric_names(self) -> MetricNames: ...

    @property
    def version_path(self) -> str:
        """HTTP path of the JSON page that states the engine's version."""
        ...

    def parse_version(self, body: str) -> str:
        """The engine version that page states; raises ValueError if it states none."""
        ...

    def launch_command(self, spec: LaunchSpec) -> LaunchCommand:
        """The command that starts one replica as described by `spec`."""
        ...

    def parse_load(self, exposition_text: str, now_s: float) -> ReplicaLoad:
        """The load a `/metrics` page reports, stamped `now_s`; raises ValueError if malformed."""
        ...
