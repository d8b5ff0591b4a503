"""Routing profiles from YAML: validated, then built from the plugin registry.

    apiVersion: orchestrator/v1alpha1
    kind: RoutingProfiles
    profiles:
      - name: capacity
        sampleSize: 8            # optional: candidates scored when more survive (default 8)
        maxFallbacks: 3          # optional (default 3)
        seed: 0                  # optional: the sampling's random seed (default 0)
        filters:
          - {type: model-served}
          - {type: kv-headroom, soft: true, params: {maxKvUsage: 0.98}}
        scorers:
          - {type: capacity-headroom, weight: 1.0}
        picker: {type: max-score, params: {seed: 0}}

Every plugin entry may carry `name` (defaults to its type) and `params` (checked by the plugin).
Errors name the profile and the field: "profile `capacity`: scorers[0].weight: ...".
The built-in profiles ship in `routing/data/profiles.yaml`; `capacity` is the default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.strict_yaml import DuplicateKeyError, load_strict_yaml
from orchestrator.routing.plugin import Filter, Picker, Scorer
from orchestrator.routing.plugins import builtin_registry
from orchestrator.routing.plugins.params import PluginParamsError
from orchestrator.routing.profile import (
    DEFAULT_SAMPLE_SIZE,
    MAX_FALLBACKS,
    FilterStep,
    Profile,
    ProfileSpec,
    ScorerStep,
)
from orchestrator.routing.registry import Plugin, PluginRegistry

DEFAULT_PROFILE = "capacity"
BUILTIN_PROFILES_FILE = "profiles.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class PluginEntry(_Strict):
    type: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)] | None = None
    params: dict[str, Any] = Field(default_factory=dict)


class FilterEntry(PluginEntry):
    soft: bool = False


class ScorerEntry(PluginEntry):
    # finite: an infinite weight makes every combined score NaN (0·inf), so no score ranks
    weight: Annotated[float, Field(gt=0.0, allow_inf_nan=False)]


class ProfileEntry(_Strict):
    name: Annotated[str, Field(min_length=1)]
    filters: list[FilterEntry] = Field(default_factory=list)
    scorers: list[ScorerEntry] = Field(default_factory=list)
    picker: PluginEntry
    sample_size: Annotated[int, Field(ge=1, alias="sampleSize")] = DEFAULT_SAMPLE_SIZE
    max_fallbacks: Annotated[int, Field(ge=0, alias="maxFallbacks")] = MAX_FALLBACKS
    seed: int = 0


class ProfilesFile(_Strict):
    api_version: Literal["orchestrator/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["RoutingProfiles"]
    profiles: Annotated[list[ProfileEntry], Field(min_length=1)]

    @model_validator(mode="after")
    def _unique_names(self) -> ProfilesFile:
        names = [p.name for p in self.profiles]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate profile names: {', '.join(duplicates)}")
        return self


def load_profiles(
    text: str, *, source: str = "profiles file", registry: PluginRegistry | None = None
) -> dict[str, Profile]:
    """Validate a RoutingProfiles document and build its profiles, by name.

    Raises `OrchestratorError` (INVALID_ARGUMENT) naming the profile and field on any problem:
    bad YAML, unknown keys, bad values, unknown plugin types, a plugin in the wrong slot, bad
    plugin params. `registry` defaults to the built-in plugins.
    """
    try:
        raw = load_strict_yaml(text)
        spec = ProfilesFile.model_validate(raw)
    except DuplicateKeyError as error:
        raise _invalid(f"{source}: {error}") from None
    except yaml.YAMLError as error:
        raise _invalid(f"{source}: not YAML: {error}") from None
    except ValidationError as error:
        raise _invalid(f"{source}: {_error_text(error, raw)}") from None
    plugins = registry or builtin_registry()
    return {entry.name: _build(entry, plugins, source) for entry in spec.profiles}


def builtin_profiles() -> dict[str, Profile]:
    """The profiles shipped with the package (fresh instances: each holds its own state)."""
    path = resources.files("orchestrator.routing") / "data" / BUILTIN_PROFILES_FILE
    return load_profiles(path.read_text(), source=f"built-in {BUILTIN_PROFILES_FILE}")


def _build(entry: ProfileEntry, registry: PluginRegistry, source: str) -> Profile:
    where = f"{source}: profile `{entry.name}`"
    filters = tuple(
        FilterStep(_plugin(registry, f, Filter, f"{where}: filters[{i}]"), soft=f.soft)
        for i, f in enumerate(entry.filters)
    )
    scorers = tuple(
        ScorerStep(_plugin(registry, s, Scorer, f"{where}: scorers[{i}]"), weight=s.weight)
        for i, s in enumerate(entry.scorers)
    )
    picker = _plugin(registry, entry.picker, Picker, f"{where}: picker")
    try:
        spec = ProfileSpec(
            name=entry.name,
            filters=filters,
            scorers=scorers,
            picker=picker,
            max_fallbacks=entry.max_fallbacks,
            sample_size=entry.sample_size,
            seed=entry.seed,
        )
    except ValueError as error:  # the profile names itself
        raise _invalid(f"{source}: {error}") from None
    return Profile(spec)


def _plugin(registry: PluginRegistry, entry: PluginEntry, kind: type[Any], where: str) -> Any:
    try:
        plugin: Plugin = registry.build(entry.type, entry.name or entry.type, entry.params)
    except PluginParamsError as error:
        raise _invalid(f"{where}.params.{error.field}: {error.reason}") from None
    except OrchestratorError as error:
        field = f".{error.param}" if error.param else ""
        raise _invalid(f"{where}{field}: {error.message}") from None
    if not isinstance(plugin, kind):
        raise _invalid(f"{where}.type: `{entry.type}` is not a {kind.__name__.lower()}")
    return plugin


def _error_text(error: ValidationError, raw: object) -> str:
    first = error.errors()[0]
    loc: Sequence[int | str] = first["loc"]
    prefix = ""
    if len(loc) >= 2 and loc[0] == "profiles" and isinstance(loc[1], int):
        prefix = f"profile {_profile_label(raw, loc[1])}: "
        loc = loc[2:]
    where = _path(loc)
    return f"{prefix}{where}: {first['msg']}" if where else f"{prefix}{first['msg']}"


def _profile_label(raw: object, index: int) -> str:
    if isinstance(raw, Mapping):
        profiles = raw.get("profiles")
        if isinstance(profiles, list) and index < len(profiles):
            entry = profiles[index]
            if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                return f"`{entry['name']}`"
    return f"#{index}"


def _path(loc: Sequence[int | str]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _invalid(message: str) -> OrchestratorError:
    return OrchestratorError(ErrorCode.INVALID_ARGUMENT, message)
