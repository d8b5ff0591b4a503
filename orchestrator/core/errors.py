"""Canonical error codes. Each frontend maps them to its wire format exactly once."""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final


class ErrorCode(StrEnum):
    """What went wrong, independent of transport (HTTP status, gRPC code)."""

    INVALID_ARGUMENT = "invalid_argument"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    UNAUTHENTICATED = "unauthenticated"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    UNAVAILABLE = "unavailable"
    BAD_GATEWAY = "bad_gateway"  # a replica's answer could not be framed with certainty
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

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle by state, not by constructor: Ray pickles an actor's exceptions to hand them to
        the caller, and plain exception pickling would call `__init__` with `args` alone, which
        lacks the code (and subclasses take other arguments still)."""
        return (_restore_error, (type(self), self.args, dict(self.__dict__)))


def _restore_error(
    cls: type[OrchestratorError], args: tuple[Any, ...], state: dict[str, Any]
) -> OrchestratorError:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


GRPC_STATUS_NAME: Final = MappingProxyType(
    {
        ErrorCode.INVALID_ARGUMENT: "INVALID_ARGUMENT",
        ErrorCode.NOT_FOUND: "NOT_FOUND",
        ErrorCode.METHOD_NOT_ALLOWED: "UNIMPLEMENTED",
        ErrorCode.UNAUTHENTICATED: "UNAUTHENTICATED",
        ErrorCode.PAYLOAD_TOO_LARGE: "RESOURCE_EXHAUSTED",
        ErrorCode.RESOURCE_EXHAUSTED: "RESOURCE_EXHAUSTED",
        ErrorCode.UNAVAILABLE: "UNAVAILABLE",
        ErrorCode.BAD_GATEWAY: "UNAVAILABLE",
        ErrorCode.DEADLINE_EXCEEDED: "DEADLINE_EXCEEDED",
        ErrorCode.INTERNAL: "INTERNAL",
    }
)
"""Each canonical code's gRPC status, by `grpc.StatusCode` member name: the one table both gRPC
servers (router frontend, control plane) read, kept here by name because `core/` imports no grpc."""


class UnknownGenerationError(OrchestratorError, ValueError):
    """A GPU name, id or label that no known generation matches."""

    def __init__(self, raw: str, known: list[str]) -> None:
        super().__init__(
            ErrorCode.INVALID_ARGUMENT,
            f"unknown GPU generation {raw!r}; known generations: {', '.join(known)}",
        )
        self.raw = raw
