"""The `router.breaker:` section: when the router stops sending requests to a failing replica.

    router:
      breaker:
        failureThreshold: 3   # consecutive failures that open a replica's circuit
        openS: 5              # seconds it stays open before a health check may half-open it

Declared once: these fields are the config keys, the `orchestrator router` flags
(`config/flags.py`), the settings the circuit breakers run with (`forwarding/breaker.py`) and
the table in docs/settings.md.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from orchestrator.config.settings_model import SettingsModel


class BreakerSpec(SettingsModel):
    """`failure_threshold` consecutive failures open a circuit for at least `open_s` seconds."""

    failure_threshold: Annotated[int, Field(ge=1)] = Field(
        default=3,
        alias="failureThreshold",
        json_schema_extra={"flag": "--breaker-failures"},
        description="consecutive failures (connect errors, 5xx, cut streams, failed health"
        " checks) that open a replica's circuit: it gets no requests",
    )
    open_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        default=5.0,
        alias="openS",
        json_schema_extra={"flag": "--breaker-open"},
        description="seconds an open circuit stays open before a passed health check lets one"
        " probe request through",
    )
