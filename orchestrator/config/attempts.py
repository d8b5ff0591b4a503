"""The `router.attempts:` section: the bounds of one attempt at a stream, and its migrations.

    router:
      attempts:
        firstByteTimeoutS: 60    # a stream's first bytes, else it is retried elsewhere (0: off)
        stallTimeoutS: 30        # the longest gap between chunks, else it moves (0: off)
        migrations: 2            # replicas tried to continue a stream that broke (0: never)

Both timeouts are stretched by the router's latency scale, as the deadline is. The defaults are
those of `RouterSettings` (`forwarding/dispatcher.py` says what each bound does).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class AttemptsSpec(BaseModel):
    """Per-attempt timeouts and mid-stream migrations of the router."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    first_byte_timeout_s: Seconds = Field(default=60.0, alias="firstByteTimeoutS")
    stall_timeout_s: Seconds = Field(default=30.0, alias="stallTimeoutS")
    migrations: Annotated[int, Field(ge=0)] = 2

    def router_flags(self) -> list[str]:
        """The `orchestrator router` flags that carry this section (as `orchestrator up` starts
        routers from a config)."""
        return [
            "--first-byte-timeout", str(self.first_byte_timeout_s),
            "--stall-timeout", str(self.stall_timeout_s),
            "--migration-attempts", str(self.migrations),
        ]  # fmt: skip
