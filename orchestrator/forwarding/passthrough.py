"""Requests that are not generations, passed to one replica and answered whole: a stored
response's retrieval or cancellation, `/tokenize`, `/detokenize`, a replica's `/v1/models`.

They take no admission slot and no key's token budget (they make no tokens), but they do keep
the deadline, and a replica that fails them counts as an upstream error like any other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from orchestrator.core.clock import Clock
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.records import Replica
from orchestrator.forwarding.metrics import RouterMetrics
from orchestrator.forwarding.upstream import (
    UpstreamConnectError,
    UpstreamDisconnected,
    UpstreamPool,
)

_PASSED_HEADERS: Final = (("content-type", "Content-Type"),)


@dataclass(frozen=True, slots=True)
class WholeReply:
    """A replica's whole answer, to relay as it is."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    replica: Replica


class ReplicaUnreachable(Exception):
    """The replica gave no answer (connect error, disconnect, 5xx or time out)."""


class Passthrough:
    """One whole request to one replica over the router's shared upstream pool."""

    def __init__(
        self,
        upstream: UpstreamPool,
        metrics: RouterMetrics,
        clock: Clock,
        *,
        connect_timeout_s: float,
    ) -> None:
        self._upstream = upstream
        self._metrics = metrics
        self._clock = clock
        self._connect_timeout_s = connect_timeout_s

    async def send(
        self, replica: Replica, method: str, path: str, body: bytes, *, deadline_s: float
    ) -> WholeReply:
        """`method` ("GET" or "POST", JSON body) `path` on `replica`; raises
        `ReplicaUnreachable` when it gives no answer below 500 before `deadline_s`."""
        timeout_s = deadline_s - self._clock.now()
        if timeout_s <= 0:
            raise ReplicaUnreachable("the deadline passed")
        try:
            if method == "GET":
                response = await self._upstream.get(
                    replica.url,
                    path,
                    timeout_s=timeout_s,
                    connect_timeout_s=self._connect_timeout_s,
                )
            else:
                response = await self._upstream.post_json(
                    replica.url,
                    path,
                    body,
                    timeout_s=timeout_s,
                    connect_timeout_s=self._connect_timeout_s,
                )
            try:
                data = await response.read()
            except BaseException:
                response.close()
                raise
            response.release()
        except (UpstreamConnectError, UpstreamDisconnected, TimeoutError) as error:
            kind = "connect" if isinstance(error, UpstreamConnectError) else "disconnect"
            self._metrics.upstream_errors.labels(replica.replica_id, kind).inc()
            raise ReplicaUnreachable(str(error) or type(error).__name__) from None
        if response.status >= 500:
            self._metrics.upstream_errors.labels(replica.replica_id, "http_5xx").inc()
            raise ReplicaUnreachable(f"HTTP {response.status}")
        headers = {
            name: response.headers[k] for k, name in _PASSED_HEADERS if k in response.headers
        }
        return WholeReply(response.status, headers, data, replica)

    async def send_to_any(
        self, replicas: Sequence[Replica], method: str, path: str, body: bytes, *, deadline_s: float
    ) -> WholeReply:
        """The first answer below 500 from `replicas`, tried in order; UNAVAILABLE when none."""
        failures = []
        for replica in replicas:
            try:
                return await self.send(replica, method, path, body, deadline_s=deadline_s)
            except ReplicaUnreachable as error:
                failures.append(f"{replica.replica_id}: {error}")
        raise OrchestratorError(
            ErrorCode.UNAVAILABLE,
            f"no replica answered {path}"
            + (f" ({len(failures)} tried)" if failures else ": none is routable"),
        )
