"""The `router.attempts:` section: the bounds of one attempt at a stream, and its migrations.

    router:
      attempts:
        firstByteTimeoutS: 60    # a stream's first bytes, else it is retried elsewhere (0: off)
        stallTimeoutS: 30        # the longest gap between chunks, else it moves (0: off)
        migrations: 2            # replicas tried to continue a stream that broke (0: never)

Declared once: these fields are the config keys, the `orchestrator router` flags
(`config/flags.py`) and the table in docs/settings.md. Both timeouts are stretched by the
router's latency scale, as the deadline is; `forwarding/dispatcher.py` says what each bound does.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import Field

from orchestrator.config.flags import to_flags
from orchestrator.config.settings_model import SettingsModel

DEFAULT_FIRST_BYTE_TIMEOUT_S: Final = 60.0
DEFAULT_STALL_TIMEOUT_S: Final = 30.0
DEFAULT_MIGRATION_ATTEMPTS: Final = 2
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class AttemptsSpec(SettingsModel):
    """Per-attempt timeouts and mid-stream migrations of the router (0 s: no bound)."""

    first_byte_timeout_s: Seconds = Field(
        default=DEFAULT_FIRST_BYTE_TIMEOUT_S,
        alias="firstByteTimeoutS",
        json_schema_extra={"flag": "--first-byte-timeout"},
        description="seconds a replica may take to send a stream's first bytes before the"
        " request is retried on another, times the latency scale; 0: only the deadline bounds it",
    )
    stall_timeout_s: Seconds = Field(
        default=DEFAULT_STALL_TIMEOUT_S,
        alias="stallTimeoutS",
        json_schema_extra={"flag": "--stall-timeout"},
        description="longest gap in seconds between a stream's chunks before it moves to another"
        " replica, times the latency scale; 0: no bound",
    )
    migrations: Annotated[int, Field(ge=0)] = Field(
        default=DEFAULT_MIGRATION_ATTEMPTS,
        json_schema_extra={"flag": "--migration-attempts"},
        description="replicas tried, at most, to continue a stream whose replica fails, stalls"
        " or drains mid-stream; 0: never",
    )

    def router_flags(self) -> list[str]:
        """The `orchestrator router` flags that carry this section (as `orchestrator up` starts
        routers from a config)."""
        return to_flags(self)
