"""The `router.timing:` section: the router's deadline, connect timeout and how fresh it keeps
the replicas' load.

    router:
      timing:
        requestDeadlineS: 600    # a request's whole life, times the latency scale
        connectTimeoutS: 2       # opening a connection to a replica
        scrapeIntervalS: 1       # a replicas file's replicas: how often their metrics are read
        loadStaleAfterS: 3       # a control plane's load report: older, the load is unknown

Declared once: these fields are the config keys, the `orchestrator router` flags
(`config/flags.py`), the fields of the router's settings (`router_settings.py`) and the table
in docs/settings.md; the scraper and the fleet state take their defaults from here.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import Field

from orchestrator.config.settings_model import SettingsModel

REQUEST_DEADLINE_S: Final = 600.0
DEFAULT_CONNECT_TIMEOUT_S: Final = 2.0
DEFAULT_SCRAPE_INTERVAL_S: Final = 1.0
# A load older than this is unknown, not idle: three missed reports at the default interval.
DEFAULT_LOAD_STALE_AFTER_S: Final = 3.0
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class RouterTimingSpec(SettingsModel):
    """Time bounds of the router as a whole (one attempt's bounds: `config/attempts.py`)."""

    request_deadline_s: Seconds = Field(
        default=REQUEST_DEADLINE_S,
        alias="requestDeadlineS",
        json_schema_extra={"flag": "--request-deadline"},
        description="seconds a request may take in all (retries and migrations included), times"
        " the latency scale; past it the client gets a 504",
    )
    connect_timeout_s: Seconds = Field(
        default=DEFAULT_CONNECT_TIMEOUT_S,
        alias="connectTimeoutS",
        json_schema_extra={"flag": "--connect-timeout"},
        description="seconds opening a connection to a replica may take",
    )
    scrape_interval_s: Seconds = Field(
        default=DEFAULT_SCRAPE_INTERVAL_S,
        alias="scrapeIntervalS",
        json_schema_extra={"flag": "--scrape-interval"},
        description="seconds between reads of the metrics of a replicas file's replicas",
    )
    load_stale_after_s: Seconds = Field(
        default=DEFAULT_LOAD_STALE_AFTER_S,
        alias="loadStaleAfterS",
        json_schema_extra={"flag": "--load-stale-after"},
        description="age in seconds past which a load report from the control plane is unknown,"
        " not idle",
    )
