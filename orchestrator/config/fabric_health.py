"""The `fabricHealth:` section: thresholds that turn a node's counter rates into its health.

    fabricHealth:
      rateWindowS: 5              # rates (pause occupancy, ACK timeouts, CNPs) over this window
      eventWindowS: 10            # counted events (carrier changes, link downs, retries) over this
      holdDownS: 5                # a better verdict must hold this long before it is reported
      carrierChangesMax: 2
      pauseOccupancyDegraded: 0.1
      pauseOccupancyUnhealthy: 0.5
      ackTimeoutsPerSDegraded: 1.0
      cnpBaselineFactor: 5.0
      cnpMinPerS: 1000
      cnpBaselineS: 300
      hbmUsedRatioDegraded: 0.95

Defaults come from `shared/reference/fabric-counters.md` §4.1/§4.2 where a public source gives a
number (cited per field) and are marked "tunable" where it does not. Worsening is reported at once;
recovery waits `holdDownS` so a flapping link does not flap the routing table with it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Ratio = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class FabricHealthSpec(BaseModel):
    """Thresholds of the fabric-health evaluation (`fabric/health.py`); all rates are per second."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    # NVSentinel polls its counters every 5 s; a rate over one such interval reacts within seconds.
    rate_window_s: Seconds = Field(default=5.0, alias="rateWindowS")
    # NVSentinel counts carrier changes "per interval"; 10 s is two of its polls (tunable).
    event_window_s: Seconds = Field(default=10.0, alias="eventWindowS")
    # Not from a source: one NVSentinel polling interval. A link flapping every few seconds stays
    # avoided anyway, because each flap stays in the event window for `eventWindowS`.
    hold_down_s: NonNegative = Field(default=5.0, alias="holdDownS")
    # NVSentinel non-fatal: carrier_changes > 2 per interval. Above it the node is UNHEALTHY;
    # link_downed > 0 (NVSentinel fatal) and retries exceeded > 0 (§4.1: page on exhaustion) too.
    carrier_changes_max: Annotated[int, Field(ge=0)] = Field(default=2, alias="carrierChangesMax")
    # §4.2 NicPfcPauseOccupancyHigh pages at 0.5 of the time paused; DEGRADED from 0.1 (tunable).
    pause_occupancy_degraded: Ratio = Field(default=0.1, alias="pauseOccupancyDegraded")
    pause_occupancy_unhealthy: Ratio = Field(default=0.5, alias="pauseOccupancyUnhealthy")
    # NVSentinel non-fatal: local_ack_timeout_err > 1/s.
    ack_timeouts_per_s_degraded: NonNegative = Field(default=1.0, alias="ackTimeoutsPerSDegraded")
    # §4.2 RdmaCongestionAnomaly: CNP rate > 5x its own baseline and > 1000/s (tunable; no public
    # CNP threshold exists, §4.1).
    cnp_baseline_factor: Annotated[float, Field(gt=1, allow_inf_nan=False)] = Field(
        default=5.0, alias="cnpBaselineFactor"
    )
    cnp_min_per_s: NonNegative = Field(default=1000.0, alias="cnpMinPerS")
    # Time constant of the CNP baseline (an exponential average of the node's own CNP rate).
    cnp_baseline_s: Seconds = Field(default=300.0, alias="cnpBaselineS")
    # llm-d pages when decode KV use passes 0.95; the same line for HBM (tunable).
    hbm_used_ratio_degraded: Ratio = Field(default=0.95, alias="hbmUsedRatioDegraded")

    @model_validator(mode="after")
    def _ordered(self) -> FabricHealthSpec:
        if self.pause_occupancy_degraded > self.pause_occupancy_unhealthy:
            raise ValueError(
                "pauseOccupancyDegraded must not exceed pauseOccupancyUnhealthy, got"
                f" {self.pause_occupancy_degraded:g} > {self.pause_occupancy_unhealthy:g}"
            )
        return self
