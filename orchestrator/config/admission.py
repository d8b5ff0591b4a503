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

The router admits requests against its estimated capacity (`orchestrator/admission/`); these are
the knobs, with the defaults of `AdmissionSettings` and `HttpSettings`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class AdmissionSpec(BaseModel):
    """Admission control, priority default and the slow-reader cap of the router."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    enabled: bool = True
    max_queue: Annotated[int, Field(ge=0)] = Field(default=1024, alias="maxQueue")
    queue_timeout_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        default=1.0, alias="queueTimeoutS"
    )
    batch_reserve: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = Field(
        default=0.1, alias="batchReserve"
    )
    capacity_factor: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        default=1.0, alias="capacityFactor"
    )
    default_priority: Literal["interactive", "batch"] = Field(
        default="interactive", alias="defaultPriority"
    )
    stream_buffer_bytes: Annotated[int, Field(ge=1)] = Field(
        default=1024 * 1024, alias="streamBufferBytes"
    )

    def router_flags(self) -> list[str]:
        """The `orchestrator router` flags that carry this section, for whatever starts routers
        from a config (as `orchestrator up` does)."""
        return [
            "--admission", "on" if self.enabled else "off",
            "--max-queue", str(self.max_queue),
            "--queue-timeout", str(self.queue_timeout_s),
            "--batch-reserve", str(self.batch_reserve),
            "--capacity-factor", str(self.capacity_factor),
            "--default-priority", self.default_priority,
            "--stream-buffer-bytes", str(self.stream_buffer_bytes),
        ]  # fmt: skip
