"""Optional API-key check for the HTTP frontend: `Authorization: Bearer <key>`.

Keys come from a file (one per line; blank lines and `#` comments skipped) or from an environment
variable (keys separated by commas or whitespace). Only SHA-256 digests are kept in memory, every
stored digest is compared in constant time on each request, and keys never reach a log or an
error message.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from orchestrator.core.errors import ErrorCode, OrchestratorError

_BEARER = "bearer "


class ApiKeys:
    """The accepted keys; `check(authorization_header)` says whether a request may pass."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = tuple(_digest(key) for key in keys if key)
        if not self._digests:
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT, "no API keys given", param="api_keys"
            )

    @classmethod
    def from_file(cls, path: Path) -> ApiKeys:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeError) as error:
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT,
                f"cannot read API keys file {path}: {getattr(error, 'strerror', None) or error}",
                param="api_keys_file",
            ) from None
        keys = [line.strip() for line in text.splitlines()]
        try:
            return cls(key for key in keys if key and not key.startswith("#"))
        except OrchestratorError:
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT,
                f"API keys file {path} holds no keys",
                param="api_keys_file",
            ) from None

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

    def check(self, authorization: str | None) -> bool:
        """Whether the `Authorization` header carries an accepted bearer key."""
        if authorization is None or authorization[: len(_BEARER)].lower() != _BEARER:
            return False
        presented = _digest(authorization[len(_BEARER) :].strip())
        accepted = False
        for digest in self._digests:
            accepted |= hmac.compare_digest(digest, presented)
        return accepted


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
