"""The built-in config (`data/default.yaml`), validated like any user's file.

Sites `kr` and `us`, 150 ms apart; 2 simulated MI300X replicas in `kr` and 2 simulated MI355X
replicas in `us`, each at time scale 10 so a 2-core machine holds them; routing profile `capacity`.
"""

from __future__ import annotations

from importlib import resources
from typing import Final

from orchestrator.config.loader import parse_config
from orchestrator.config.schema import OrchestratorConfig

DEFAULT_CONFIG_FILE: Final = "default.yaml"


def default_config_text() -> str:
    """The built-in config as YAML: a starting point to copy and edit."""
    return (resources.files("orchestrator.config") / "data" / DEFAULT_CONFIG_FILE).read_text(
        encoding="utf-8"
    )


def default_config() -> OrchestratorConfig:
    """The built-in config, parsed through the same validation as a user's file."""
    return parse_config(default_config_text(), source=f"built-in {DEFAULT_CONFIG_FILE}")
