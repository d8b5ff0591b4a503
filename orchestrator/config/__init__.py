"""The orchestrator's one versioned YAML config: frozen, validated models and their loader
(read with `core.strict_yaml`: unknown and repeated keys refused with their path).

Layer 1, pure: may import `core/` only; no sockets, web framework, Ray or gRPC.
"""

from __future__ import annotations

from orchestrator.config.defaults import default_config, default_config_text
from orchestrator.config.errors import ConfigError, ConfigProblem
from orchestrator.config.fabric_health import FabricHealthSpec
from orchestrator.config.loader import dump_config, load_config, parse_config, validate_config
from orchestrator.config.schema import (
    API_VERSION,
    BUILTIN_PROFILE_NAMES,
    KIND,
    ControlPlaneSpec,
    ExportersSpec,
    OrchestratorConfig,
    PoolSpec,
    RouterSpec,
    SiteSpec,
)

__all__ = [
    "API_VERSION",
    "BUILTIN_PROFILE_NAMES",
    "KIND",
    "ConfigError",
    "ConfigProblem",
    "ControlPlaneSpec",
    "ExportersSpec",
    "FabricHealthSpec",
    "OrchestratorConfig",
    "PoolSpec",
    "RouterSpec",
    "SiteSpec",
    "default_config",
    "default_config_text",
    "dump_config",
    "load_config",
    "parse_config",
    "validate_config",
]
