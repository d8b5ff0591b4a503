"""The field types of the orchestrator config, each with its own check: DNS-label names, ports,
RTTs, scales, endpoint URLs, and the services' default ports."""

from __future__ import annotations

from typing import Annotated, Final
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field

DEFAULT_ROUTER_HTTP_PORT: Final = 8000
DEFAULT_ROUTER_GRPC_PORT: Final = 50051
DEFAULT_ROUTER_METRICS_PORT: Final = 9190
DEFAULT_CONTROL_PLANE_GRPC_PORT: Final = 50052
DEFAULT_EXPORTER_PORT: Final = 9400
MAX_PORT: Final = 65535
_MAX_LABEL = 63


def _dns_label(value: str) -> str:
    if (
        not 0 < len(value) <= _MAX_LABEL
        or not all(c.isdigit() or ("a" <= c <= "z") or c == "-" for c in value)
        or value[0] == "-"
        or value[-1] == "-"
    ):
        raise ValueError(
            f"{value!r} is not a valid name: use lowercase letters a-z, digits and '-', starting"
            f" and ending with a letter or digit, at most {_MAX_LABEL} characters"
        )
    return value


def _port(value: int) -> int:
    if not 1 <= value <= MAX_PORT:
        raise ValueError(f"must be a port number in 1..{MAX_PORT}, got {value}")
    return value


def _port_or_any(value: int) -> int:
    """A port, or 0 for "any free port"."""
    return value if value == 0 else _port(value)


def _rtt(value: float) -> float:
    if value < 0:
        raise ValueError(f"an RTT must be >= 0 ms, got {value:g}")
    return value


def _endpoint(value: str) -> str:
    problem = (
        f"must be the http(s) URL of a server's root, like http://10.0.0.5:8000; got {value!r}"
    )
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise ValueError(problem) from None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username is not None
        or (port is not None and not 1 <= port <= MAX_PORT)
    ):
        raise ValueError(problem)
    return value.rstrip("/")


Name = Annotated[str, AfterValidator(_dns_label)]
Port = Annotated[int, Field(strict=True), AfterValidator(_port)]
PortOrAny = Annotated[int, Field(strict=True), AfterValidator(_port_or_any)]
RttMs = Annotated[float, Field(strict=True, allow_inf_nan=False), AfterValidator(_rtt)]
Scale = Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)]
EndpointUrl = Annotated[str, AfterValidator(_endpoint)]
