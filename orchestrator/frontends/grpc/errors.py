"""Canonical error codes as gRPC status codes: the gRPC frontend's one translation of errors."""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any, Final

import grpc

from orchestrator.core.errors import GRPC_STATUS_NAME, ErrorCode, OrchestratorError
from orchestrator.core.openai_errors import CODE_OF_STATUS, code_of_status

GRPC_STATUS: Final = MappingProxyType(
    {code: grpc.StatusCode[name] for code, name in GRPC_STATUS_NAME.items()}
)


def grpc_status(error: OrchestratorError) -> tuple[grpc.StatusCode, str]:
    """The status code and details a gRPC client gets for a canonical error.

    The details name the offending field when the error knows it and its message does not.
    """
    details = error.message
    if error.param and error.param not in details:
        details = f"{error.param}: {details}"
    return GRPC_STATUS[error.code], details


def _from_detail(detail: Any, code: ErrorCode, fallback: str) -> OrchestratorError:
    """An OpenAI error object's message and param, under the code the caller worked out."""
    body = detail if isinstance(detail, dict) else {}
    message, param = body.get("message"), body.get("param")
    return OrchestratorError(
        code,
        message if isinstance(message, str) and message else fallback,
        param=param if isinstance(param, str) else None,
    )


def error_from_event(detail: Any) -> OrchestratorError:
    """The canonical error behind an SSE `{"error": {...}}` event that ended a stream.

    The event carries the HTTP status of its canonical code (as `code`). One that does not say
    what went wrong is taken as the replica failing (UNAVAILABLE): the stream broke after it
    started, which the client can retry.
    """
    status = detail.get("code") if isinstance(detail, dict) else None
    # It carries the HTTP status of its canonical code: read back through the same table.
    code = CODE_OF_STATUS.get(status) if isinstance(status, int) else None
    return _from_detail(detail, code or ErrorCode.UNAVAILABLE, "the replica's stream failed")


def error_from_reply(status: int, body: bytes) -> OrchestratorError:
    """The canonical error behind a replica's whole error answer (an HTTP status >= 300).

    The status says what kind of error it is; the OpenAI error body, when there is one, says why.
    A 4xx the table does not know is the client's mistake, anything else the replica's.
    """
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        payload = None
    code = code_of_status(status)
    detail = payload.get("error") if isinstance(payload, dict) else None
    return _from_detail(detail, code, f"the replica answered HTTP {status}")
