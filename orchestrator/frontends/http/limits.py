"""The limits of the router's HTTP connections, shared by the request reader and the connection."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.config.http import DEFAULT_MAX_BODY_BYTES, DEFAULT_STREAM_BUFFER_BYTES


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """Limits of one server's connections (sizes in bytes, times in seconds).

    `write_buffer_bytes` is the transport's high-water mark: past it the connection stops
    reading and answering pipelined requests until the client has read; a client that reads
    nothing for `write_stall_s` once it is reached is dropped."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    stream_buffer_bytes: int = DEFAULT_STREAM_BUFFER_BYTES
    idle_s: float = 75.0
    head_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_fields: int = 128
    max_field_bytes: int = 8190
    max_head_bytes: int = 64 * 1024
    cut_grace_s: float = 5.0
    shutdown_grace_s: float = 60.0
    write_buffer_bytes: int = 256 * 1024
    write_stall_s: float = 30.0
