"""The `router.upstream:` section: the router's connection pool to the replicas.

    router:
      upstream:
        limit: 4096               # requests in flight to all replicas together
        limitPerHost: 1024        # ... and to one replica
        keepaliveS: 4             # an idle connection is closed after this long
        maxAnswerBytes: 33554432  # a whole (not streamed) answer, at most

Declared once: these fields are the config keys, the `orchestrator router` flags
(`config/flags.py`), the settings the pool runs with (`forwarding/upstream.py`, which adds the
replicas' TLS files) and the table in docs/settings.md.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import Field

from orchestrator.config.settings_model import SettingsModel

DEFAULT_MAX_ANSWER_BYTES: Final = 32 * 1024 * 1024
Count = Annotated[int, Field(ge=1)]


class UpstreamSpec(SettingsModel):
    """Connection-pool limits.

    A request over a cap waits for a free connection (within its deadline); idle connections
    do not count. The keep-alive is below the 5 s that vLLM's uvicorn keeps one, so the router
    closes idle connections before the replica does and rarely reuses a half-closed one.
    """

    limit: Count = Field(
        default=4096,
        json_schema_extra={"flag": "--upstream-limit"},
        description="requests in flight to all replicas together; more wait for a connection",
    )
    limit_per_host: Count = Field(
        default=1024,
        alias="limitPerHost",
        json_schema_extra={"flag": "--upstream-limit-per-replica"},
        description="requests in flight to one replica; more wait for a connection",
    )
    keepalive_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        default=4.0,
        alias="keepaliveS",
        json_schema_extra={"flag": "--upstream-keepalive"},
        description="seconds an idle connection to a replica is kept for reuse",
    )
    max_answer_bytes: Count = Field(
        default=DEFAULT_MAX_ANSWER_BYTES,
        alias="maxAnswerBytes",
        description="largest answer read whole (not streamed); a larger one is a malformed"
        " answer, the client gets a 502",
    )
