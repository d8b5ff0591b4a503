"""The `router.admission:` section: overload control in front of the router's picker.

    router:
      admission:
        enabled: true            # false: forward everything, as before (the off switch)
        maxQueue: 1024           # requests that may wait for admission
        queueTimeoutS: 1.0       # the longest wait, times the router's latency scale
        batchReserve: 0.1        # share of capacity batch requests leave to interactive ones
        capacityFactor: 1.0      # admit up to this multiple of the estimated capacity
        defaultPriority: interactive
        streamBufferBytes: 1048576   # a client this far behind a stream has it cut

Declared once: these fields are the config keys, the `orchestrator router` flags
(`config/flags.py`), the settings admission runs with (`AdmissionLimits`, which
`admission/settings.py` builds on) and the table in docs/settings.md.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from orchestrator.config.flags import to_flags
from orchestrator.config.http import StreamBufferSpec
from orchestrator.config.settings_model import SettingsModel


class AdmissionLimits(SettingsModel):
    """What admission control runs with (the router's `AdmissionSettings`)."""

    enabled: bool = Field(
        default=True,
        json_schema_extra={"flag": "--admission"},
        description="admit requests against the fleet's estimated capacity, refusing with 429"
        " what cannot be served within the queue timeout",
    )
    max_queue: Annotated[int, Field(ge=0)] = Field(
        default=1024, alias="maxQueue", description="requests that may wait for admission"
    )
    queue_timeout_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        default=1.0,
        alias="queueTimeoutS",
        json_schema_extra={"flag": "--queue-timeout"},
        description="seconds a request may wait for admission, times the latency scale",
    )
    batch_reserve: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = Field(
        default=0.1,
        alias="batchReserve",
        description="share of the capacity batch requests leave to interactive ones",
    )
    capacity_factor: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        default=1.0,
        alias="capacityFactor",
        description="admit up to this multiple of the fleet's estimated capacity within the"
        " targets",
    )
    default_priority: Literal["interactive", "batch"] = Field(
        default="interactive",
        alias="defaultPriority",
        description="class of a request that names none",
    )


class AdmissionSpec(StreamBufferSpec, AdmissionLimits):
    """Admission control, priority default and the slow-reader cap of the router (declared in
    `config/http.py`, which the HTTP front end's settings share)."""

    def router_flags(self) -> list[str]:
        """The `orchestrator router` flags that carry this section, for whatever starts routers
        from a config (as `orchestrator up` does)."""
        return to_flags(self)
