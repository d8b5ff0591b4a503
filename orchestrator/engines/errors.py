"""Errors raised by engine adapters, each with a canonical code from `core.errors`."""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.core.errors import ErrorCode, OrchestratorError


class UnknownEngineKindError(OrchestratorError, ValueError):
    """An engine kind that no adapter serves; the message quotes it and lists the known kinds."""

    def __init__(self, raw: object, known: Iterable[str]) -> None:
        super().__init__(
            ErrorCode.INVALID_ARGUMENT,
            f"unknown engine kind {raw!r}; known kinds: {', '.join(known)}",
            param="engine",
        )
        self.raw = raw


class MalformedMetricsPageError(OrchestratorError, ValueError):
    """An engine's `/metrics` page that cannot be read as a load.

    UNAVAILABLE because the replica's load is then unknown, as if the scrape had failed.
    """

    def __init__(self, problem: str) -> None:
        super().__init__(ErrorCode.UNAVAILABLE, f"malformed metrics page: {problem}")


class MissingMetricsError(OrchestratorError, ValueError):
    """A readable `/metrics` page without a series the adapter needs (a renamed metric, an engine
    started without its stats): the load is unknown, never read as zero.

    UNAVAILABLE for the same reason as a malformed page; `missing` lists the series, spelled as
    PromQL selectors.
    """

    def __init__(self, missing: list[str]) -> None:
        super().__init__(
            ErrorCode.UNAVAILABLE, f"metrics page lacks {', '.join(missing)}: load unknown"
        )
        self.missing = tuple(missing)


class NotLaunchableError(OrchestratorError, RuntimeError):
    """A request to start a replica whose engine we do not start (it runs elsewhere)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_ARGUMENT, message, param="engine")
