"""Canonical errors in the OpenAI wire shape: the one mapping every HTTP server here uses (the
router's frontend, the simulated engine, the control plane's service discovery) and every client
reading such an answer back (the gRPC frontend relaying a replica's error).

The body is `{"error": {"message", "type", "param", "code"}}`, as the OpenAI API and current
vLLM send it, so the official client raises the matching exception class. Transport-free: each
server's own glue (aiohttp middleware, the router's connection) only calls these.
"""

from __future__ import annotations

import logging
import traceback
from types import MappingProxyType
from typing import Any, Final

from orchestrator.core.errors import ErrorCode, OrchestratorError

HTTP_STATUS: Final = MappingProxyType(
    {
        ErrorCode.INVALID_ARGUMENT: (400, "BadRequestError"),
        ErrorCode.UNAUTHENTICATED: (401, "AuthenticationError"),
        ErrorCode.NOT_FOUND: (404, "NotFoundError"),
        ErrorCode.METHOD_NOT_ALLOWED: (405, "MethodNotAllowedError"),
        ErrorCode.PAYLOAD_TOO_LARGE: (413, "RequestTooLargeError"),
        ErrorCode.RESOURCE_EXHAUSTED: (429, "RateLimitError"),
        ErrorCode.INTERNAL: (500, "InternalServerError"),
        ErrorCode.BAD_GATEWAY: (502, "BadGatewayError"),
        ErrorCode.UNAVAILABLE: (503, "ServiceUnavailableError"),
        ErrorCode.DEADLINE_EXCEEDED: (504, "TimeoutError"),
    }
)

# The table read backwards: the canonical code an HTTP error status stands for.
CODE_OF_STATUS: Final = MappingProxyType(
    {status: code for code, (status, _) in HTTP_STATUS.items()}
)

_log = logging.getLogger(__name__)


def code_of_status(status: int) -> ErrorCode:
    """The canonical code behind HTTP error `status`; one the table does not hold is the client's
    mistake when a 4xx (INVALID_ARGUMENT), the server's otherwise (UNAVAILABLE)."""
    code = CODE_OF_STATUS.get(status)
    if code is not None:
        return code
    return ErrorCode.INVALID_ARGUMENT if 400 <= status < 500 else ErrorCode.UNAVAILABLE


def served_error(error: Exception, *, method: str, path: str) -> OrchestratorError:
    """What a server answers for an exception its handler raised: an `OrchestratorError` as it
    is; anything else is a bug of ours, logged with its type and stack (the method and path
    only: never the body, nor the exception's message, which may quote it) and answered as
    INTERNAL, so the server stays up."""
    if isinstance(error, OrchestratorError):
        return error
    log_unhandled(_log, error, f"{method} {path}")
    return OrchestratorError(ErrorCode.INTERNAL, "internal server error")


def log_unhandled(logger: logging.Logger, error: BaseException, serving: str) -> None:
    """Log a bug met while serving `serving`: the exception's type and stack, not its message
    (a KeyError or ValueError on client data quotes that data)."""
    stack = "".join(traceback.format_tb(error.__traceback__)).rstrip()
    logger.error("unhandled %s serving %s\n%s", type(error).__name__, serving, stack)


def openai_error(error: OrchestratorError) -> tuple[int, dict[str, Any]]:
    """HTTP status and JSON body for a canonical error."""
    status, kind = HTTP_STATUS[error.code]
    return status, {
        "error": {"message": error.message, "type": kind, "param": error.param, "code": status}
    }
