"""Canonical errors in the OpenAI wire shape, the one table every HTTP server here uses.

The body is `{"error": {"message", "type", "param", "code"}}`, as the OpenAI API and current
vLLM send it, so the official client raises the matching exception class.
"""

from __future__ import annotations

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


def openai_error(error: OrchestratorError) -> tuple[int, dict[str, Any]]:
    """HTTP status and JSON body for a canonical error."""
    status, kind = HTTP_STATUS[error.code]
    return status, {
        "error": {"message": error.message, "type": kind, "param": error.param, "code": status}
    }
