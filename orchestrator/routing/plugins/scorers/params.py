"""The scorers' parameter models, kept apart from the scorers so those compile with mypyc.

mypyc rejects pydantic's `Field(...)` class attributes, so these models stay interpreted (this
module is not in `COMPILED_MODULES`) while the scorers that validate their `params` with them are
compiled. docs/compiled.md.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from orchestrator.routing.plugins.params import PluginParamsModel
from orchestrator.routing.signals import DEFAULT_DEGRADED_CAPACITY_FACTOR

DEFAULT_PREFIX_LOAD_FACTOR = 0.25
DEFAULT_VIRTUAL_NODES = 64
DEFAULT_PREFIX_NOMINEES = 2
DEFAULT_MARGIN_S = 0.05
DEFAULT_REMOTE_SCORE = 0.0
DEFAULT_SITE_NOMINEES = 2


class CapacityHeadroomParams(PluginParamsModel):
    degraded_capacity_factor: Annotated[
        float, Field(gt=0.0, le=1.0, alias="degradedCapacityFactor")
    ] = DEFAULT_DEGRADED_CAPACITY_FACTOR


class LatencySloParams(PluginParamsModel):
    degraded_capacity_factor: Annotated[
        float, Field(gt=0.0, le=1.0, alias="degradedCapacityFactor")
    ] = DEFAULT_DEGRADED_CAPACITY_FACTOR


class PrefixAffinityParams(PluginParamsModel):
    load_factor: Annotated[float, Field(ge=0.0, alias="loadFactor")] = DEFAULT_PREFIX_LOAD_FACTOR
    degraded_capacity_factor: Annotated[
        float, Field(gt=0.0, le=1.0, alias="degradedCapacityFactor")
    ] = DEFAULT_DEGRADED_CAPACITY_FACTOR
    virtual_nodes: Annotated[int, Field(ge=1, le=1024, alias="virtualNodes")] = (
        DEFAULT_VIRTUAL_NODES
    )
    nominees: Annotated[int, Field(ge=1, le=64)] = DEFAULT_PREFIX_NOMINEES


class SiteLocalityParams(PluginParamsModel):
    remote_score: Annotated[float, Field(ge=0.0, le=1.0, alias="remoteScore")] = (
        DEFAULT_REMOTE_SCORE
    )
    margin_s: Annotated[float, Field(ge=0.0, alias="marginS")] = DEFAULT_MARGIN_S
    degraded_capacity_factor: Annotated[
        float, Field(gt=0.0, le=1.0, alias="degradedCapacityFactor")
    ] = DEFAULT_DEGRADED_CAPACITY_FACTOR
    nominees: Annotated[int, Field(ge=1, le=64)] = DEFAULT_SITE_NOMINEES
    seed: int = 0
