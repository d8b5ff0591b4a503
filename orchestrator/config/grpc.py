"""The `router.grpc:` section: the bounds of the router's gRPC front end.

    router:
      grpc:
        graceS: 30               # calls in flight may run on this long after a stop
        healthIntervalS: 0.5     # how often the health service re-reads readiness
        maxMessageBytes: 8388608 # a larger request message is refused (as the HTTP body cap)
        writeStallS: 30          # a stream whose client takes no message this long is cut
        handshakeS: 10           # a connection's handshake, at most
        idleS: 75                # a connection without calls is closed after this long

Declared once: these fields are the config keys, the `orchestrator router` flags
(`config/flags.py`), the settings the gRPC server runs with (`GrpcSettings`) and the table in
docs/settings.md.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import Field

from orchestrator.config.http import DEFAULT_MAX_BODY_BYTES
from orchestrator.config.settings_model import SettingsModel

DEFAULT_WRITE_STALL_S: Final = 30.0
C_INT_MAX: Final = 2**31 - 1  # gRPC takes its channel options as C ints
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
# a bound gRPC itself keeps, in milliseconds: at most a C int of them (24.8 days)
CoreSeconds = Annotated[float, Field(gt=0, le=C_INT_MAX // 1000, allow_inf_nan=False)]


class GrpcSpec(SettingsModel):
    """Time bounds (seconds) and the message cap of the gRPC port."""

    grace_s: Seconds = Field(
        default=30.0,
        alias="graceS",
        json_schema_extra={"flag": "--grpc-grace"},
        description="seconds calls in flight may run on after the server is told to stop",
    )
    health_interval_s: Seconds = Field(
        default=0.5,
        alias="healthIntervalS",
        json_schema_extra={"flag": "--grpc-health-interval"},
        description="seconds between the health service's reads of the router's readiness",
    )
    max_message_bytes: Annotated[int, Field(gt=0, le=C_INT_MAX)] = Field(
        default=DEFAULT_MAX_BODY_BYTES,
        alias="maxMessageBytes",
        json_schema_extra={"flag": "--grpc-max-message-bytes"},
        description="largest request message accepted, in bytes (as the HTTP body cap)",
    )
    write_stall_s: Seconds = Field(
        default=DEFAULT_WRITE_STALL_S,
        alias="writeStallS",
        json_schema_extra={"flag": "--grpc-write-stall"},
        description="seconds a stream's client may take no message before the stream is cut",
    )
    handshake_s: CoreSeconds = Field(
        default=10.0,
        alias="handshakeS",
        json_schema_extra={"flag": "--grpc-handshake-timeout"},
        description="seconds a connection may take to finish its handshake",
    )
    idle_s: CoreSeconds = Field(
        default=75.0,
        alias="idleS",
        json_schema_extra={"flag": "--grpc-idle"},
        description="seconds a connection without calls is kept (the HTTP port's idle bound)",
    )
