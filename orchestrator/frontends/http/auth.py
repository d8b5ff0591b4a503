"""API keys for the HTTP frontend: `Authorization: Bearer <key>`.

Keys come from a keys file, followed on change (`admission/keys.py` has the format, with per-key
limits), or from an environment variable (keys separated by commas or whitespace, no limits).
Only SHA-256 digests are kept, a presented key is compared with every stored digest in constant
time, and keys never reach a log, a metric or an error message (metrics use the key id). An
`ApiKeys` is the router's `KeyAuthority`: given to `RouterService.use_api_keys`, the gRPC frontend
checks the same keys (as `authorization` metadata) with the same reloads and per-key limits.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from orchestrator.admission.keys import (
    DEFAULT_RELOAD_INTERVAL_S,
    ApiKey,
    KeyFile,
    KeyLimits,
    KeyRing,
    bearer_token,
    digest_of,
)
from orchestrator.core.errors import ErrorCode, OrchestratorError


class ApiKeys:
    """The accepted keys; `authenticate(authorization_header)` gives the matching key or None."""

    def __init__(self, keys: Iterable[str]) -> None:
        ring = KeyRing(
            ApiKey(f"key-{digest.hex()[:8]}", digest, KeyLimits())
            for digest in (digest_of(key) for key in keys if key)
        )
        if not ring.keys:
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT, "no API keys given", param="api_keys"
            )
        self._ring = ring
        self.file: KeyFile | None = None

    @classmethod
    def from_file(cls, path: Path, reload_interval_s: float = DEFAULT_RELOAD_INTERVAL_S) -> ApiKeys:
        """Keys (and their limits) from `path`, re-read when it changes."""
        keys = cls.__new__(cls)
        keys.file = KeyFile(path, reload_interval_s=reload_interval_s)
        keys._ring = keys.file.ring()
        return keys

    @classmethod
    def from_env(cls, name: str, environ: Mapping[str, str] | None = None) -> ApiKeys:
        raw = (os.environ if environ is None else environ).get(name, "")
        try:
            return cls(raw.replace(",", " ").split())
        except OrchestratorError:
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT,
                f"environment variable {name} holds no API keys",
                param="api_keys_env",
            ) from None

    def on_reload(self, forget_except: Callable[[set[str]], None]) -> None:
        """Tell `forget_except` the key ids after each reload of the keys file."""
        if self.file is not None:
            self.file.on_reload = forget_except

    def authenticate(self, authorization: str | None) -> ApiKey | None:
        """The key the `Authorization` header carries, if it is an accepted one."""
        token = bearer_token(authorization)
        if token is None:
            return None
        ring = self._ring if self.file is None else self.file.ring()
        return ring.match(token)

    def check(self, authorization: str | None) -> bool:
        """Whether the `Authorization` header carries an accepted bearer key."""
        return self.authenticate(authorization) is not None
