"""The one error admission raises: a request refused for now, with when to try again."""

from __future__ import annotations

import math

from orchestrator.core.errors import ErrorCode, OrchestratorError


class Refused(OrchestratorError):
    """RESOURCE_EXHAUSTED (HTTP 429, gRPC RESOURCE_EXHAUSTED) with a retry hint.

    `retry_after_s` is the router's estimate of when the same request would be accepted;
    `reason` is a short label for metrics (`queue_full`, `queue_timeout`, `requests`, ...).
    """

    def __init__(self, message: str, *, retry_after_s: float, reason: str) -> None:
        super().__init__(ErrorCode.RESOURCE_EXHAUSTED, message)
        self.retry_after_s = max(0.0, retry_after_s)
        self.reason = reason

    @property
    def retry_after_header(self) -> str:
        """Whole seconds, at least 1: the `Retry-After` header takes no fractions."""
        return str(max(1, math.ceil(self.retry_after_s)))
