"""What the cross-field checks can still read of a config document that failed validation.

A malformed field stops the whole model before its cross-field checks run. So that one report lists
every problem, the loader validates each part on its own: the services' sections with their own
models (absent or empty, the config's default for it), and the sites and pools leniently, field by
field, through the few fields the checks read, so that a pool with a bad generation still counts
towards duplicate names. A part that does not validate is None and the checks skip it: its own
error is already in the report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from orchestrator.config.cross_checks import cross_field_problems, service_ports
from orchestrator.config.errors import ConfigProblem
from orchestrator.config.fields import RttMs
from orchestrator.config.schema import (
    ControlPlaneSpec,
    ExportersSpec,
    OrchestratorConfig,
    RouterSpec,
    bare_sites,
)


def _none_if_invalid(value: object, handler: ValidatorFunctionWrapHandler) -> object:
    try:
        return handler(value)
    except ValidationError:
        return None


_Lenient = WrapValidator(_none_if_invalid)


class _Readable(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class _PoolFields(_Readable):
    """A pool's name, site and endpoints, each None where it is not of its type."""

    name: Annotated[str | None, _Lenient] = None
    site: Annotated[Annotated[str, Field(min_length=1)] | None, _Lenient] = None
    endpoints: Annotated[tuple[Annotated[str | None, _Lenient], ...] | None, _Lenient] = None


class _SiteFields(_Readable):
    """A site's RTT table; an entry that is not a valid RTT is None, a table that is no mapping
    of names is None."""

    rtt_ms: Annotated[dict[str, Annotated[RttMs | None, _Lenient]] | None, _Lenient] = Field(
        default_factory=dict, alias="rttMs"
    )


class _Document(_Readable):
    sites: Annotated[
        dict[str, Annotated[_SiteFields | None, _Lenient]] | None,
        BeforeValidator(bare_sites),
        _Lenient,
    ] = None
    pools: Annotated[tuple[Annotated[_PoolFields | None, _Lenient], ...] | None, _Lenient] = None


def _section(raw: Mapping[Any, Any], name: str, model: type[BaseModel]) -> BaseModel | None:
    """The top-level section `name` validated on its own. Absent or empty (`router:`, refused by
    its own check), it is the config's default for it, as it would be once the key is removed."""
    field = OrchestratorConfig.model_fields[name]
    key = field.alias or name
    value = raw[key] if key in raw else raw.get(name)
    if value is None:
        default = field.get_default(call_default_factory=True)
        return default if isinstance(default, model) else None
    try:
        return model.model_validate(value)
    except ValidationError:
        return None


def partial_cross_field_problems(raw: Mapping[Any, Any]) -> list[ConfigProblem]:
    """The cross-field problems among the parts of `raw` that validate."""
    document = _Document.model_validate(raw)
    sites = (
        None
        if document.sites is None
        else {name: None if site is None else site.rtt_ms for name, site in document.sites.items()}
    )
    sections = {
        "router": _section(raw, "router", RouterSpec),
        "controlPlane": _section(raw, "control_plane", ControlPlaneSpec),
        "exporters": _section(raw, "exporters", ExportersSpec),
    }
    return cross_field_problems(sites, document.pools or (), service_ports(sections))
