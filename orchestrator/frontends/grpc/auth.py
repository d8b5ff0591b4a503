"""API keys on the gRPC frontend: `authorization: Bearer <key>` call metadata, as the HTTP header.

The router's one `KeyAuthority` (`RouterService.api_keys`) checks the key, so a key is hashed,
compared in constant time, reloaded and limited exactly as over HTTP. Only RouterService calls
are checked; the health and reflection services stay open (load balancers and tooling probe them
without a key). A call that carries no key, more than one, or one that is not accepted is refused
with UNAUTHENTICATED; the key never reaches a log, a metric or the status details.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from orchestrator.admission.keys import ApiKey, KeyAuthority
from orchestrator.core.errors import ErrorCode, OrchestratorError

AUTHORIZATION_KEY: Final = "authorization"  # gRPC metadata keys are lower case


def authorization_of(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The call's one `authorization` value; None when it has none, several, or a binary one."""
    values = [value for key, value in metadata or () if key == AUTHORIZATION_KEY]
    if len(values) != 1 or not isinstance(values[0], str):
        return None
    return values[0]


def caller_key(
    keys: KeyAuthority | None, metadata: Iterable[tuple[str, str | bytes]] | None
) -> ApiKey | None:
    """The caller's accepted key (None when the router requires none); raises UNAUTHENTICATED."""
    if keys is None:
        return None
    key = keys.authenticate(authorization_of(metadata))
    if key is None:
        raise OrchestratorError(
            ErrorCode.UNAUTHENTICATED,
            "Incorrect or missing API key: send call metadata `authorization: Bearer <key>`.",
        )
    return key
