"""Canonical error codes. Each frontend maps them to its wire format exactly once."""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """What went wrong, independent of transport (HTTP status, gRPC code)."""

    INVALID_ARGUMENT = "invalid_argument"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    UNAUTHENTICATED = "unauthenticated"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    UNAVAILABLE = "unavailable"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    INTERNAL = "internal"


class OrchestratorError(Exception):
    """An error with a canonical code and a message meant for the user.

    `param` names the offending request or config field when there is one.
    """

    def __init__(self, code: ErrorCode, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


class UnknownGenerationError(OrchestratorError, ValueError):
    """A GPU name, id or label that no known generation matches."""

    def __init__(self, raw: str, known: list[str]) -> None:
        super().__init__(
            ErrorCode.INVALID_ARGUMENT,
            f"unknown GPU generation {raw!r}; known generations: {', '.join(known)}",
        )
        self.raw = raw
