"""A router's side of `WatchRoutingTable`: keep a `TableHolder` following the control plane.

The holder keeps the last table it got whenever the control plane is unreachable (stale, not
stopped: routers go on serving from it), and the watch reconnects, asking only for versions newer
than the one it holds. With a `LoadSink` (the router), the watch asks for loads too: each
snapshot's loads and each delta between snapshots go to the sink, dated on the sink's clock
(`clock`) from the age the control plane gives them, so no two machines' clocks are compared.
Needs no Ray: it is gRPC and translation only.

One channel serves every watch call: gRPC reconnects it itself (its own jittered backoff, bounded
like ours), and between calls the watch waits a delay that grows with each failure, with full
jitter (`core.backoff`), so routers do not all meet a restarted control plane at once; the first
message of a working stream resets it. With TLS files, a failed call checks them: once they have
changed on disk the channel is opened anew, so a rotated client certificate is presented from the
next call.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable
from typing import Any, Final, Protocol

import grpc

from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2 as pb
from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2_grpc as pb_grpc
from orchestrator.controlplane.grpc_translate import delta_from_pb, table_from_pb
from orchestrator.core.backoff import Backoff
from orchestrator.core.errors import OrchestratorError
from orchestrator.core.records import LoadReport
from orchestrator.security.files import Signature, TlsFiles
from orchestrator.security.grpc_tls import aio_channel
from orchestrator.table.source import TableHolder

log = logging.getLogger(__name__)

DEFAULT_RETRY_S: Final = 1.0
MAX_RETRY_S: Final = 10.0
# A partition that drops packets silently (no FIN or RST) would leave the watch waiting forever:
# gRPC pings every 10 s, also between calls and however long the table stays unchanged, and fails
# the stream when no answer comes in 5 s (gRPC bounds a keepalive ping's wait by the ping timeout
# as well, 60 s by default, hence both), so the watch reconnects. The control plane permits pings
# this often (`grpc_service.SERVER_OPTIONS`).
WATCH_CHANNEL_OPTIONS: Final = (
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.ping_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)


class LoadSink(Protocol):
    """Where a watch hands the replicas' load reports (the router's fleet state)."""

    def apply_loads(self, reports: Iterable[LoadReport]) -> None: ...


async def follow_routing_table(
    target: str,
    holder: TableHolder,
    *,
    retry_s: float = DEFAULT_RETRY_S,
    tls: TlsFiles | None = None,
    loads: LoadSink | None = None,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> None:
    """Feed `holder` (and `loads`, if given) from the control plane at `target` ("host:port")
    until cancelled. The table is installed before its loads are handed on, so the sink knows
    every replica they name. After a failure the next call waits up to `retry_s`, twice that
    after the next failure, and so on up to `MAX_RETRY_S` (`rng` draws the jitter)."""
    backoff = Backoff(retry_s, max(retry_s, MAX_RETRY_S), rng=rng or random.Random())
    channel = _WatchChannel(target, tls, (*WATCH_CHANNEL_OPTIONS, *_reconnect_options(backoff)))
    try:
        while True:
            try:
                stub: Any = pb_grpc.ControlPlaneServiceStub(await channel.current())  # type: ignore[no-untyped-call]
                request = pb.WatchRoutingTableRequest(
                    after_version=holder.snapshot().version, with_loads=loads is not None
                )
                async for message in stub.WatchRoutingTable(request):
                    backoff.reset()
                    received_at_s = clock()
                    if message.loads_only:
                        if loads is not None:
                            loads.apply_loads(delta_from_pb(message, received_at_s).loads)
                        continue
                    table = table_from_pb(message, received_at_s)
                    holder.replace(table)
                    if loads is not None:
                        loads.apply_loads(table.loads.values())
            except grpc.aio.AioRpcError as exc:
                log.warning(
                    "control plane at %s unreachable (%s); serving routing table version %d"
                    " until it is back",
                    target, exc.code().name, holder.snapshot().version,
                )  # fmt: skip
            except OrchestratorError as error:  # TLS files unreadable mid-rotation: retry
                log.warning("control plane TLS files: %s", error.message)
            ceiling_s = backoff.ceiling_s
            delay_s = backoff.next_delay_s()
            log.debug("watch: next call in %.4f s (at most %.4f s)", delay_s, ceiling_s)
            await asyncio.sleep(delay_s)
    finally:
        await channel.close()


def _reconnect_options(backoff: Backoff) -> tuple[tuple[str, int], ...]:
    """gRPC's own reconnect of the channel, bounded like the calls' backoff."""
    return (
        ("grpc.initial_reconnect_backoff_ms", max(1, round(backoff.first_s * 1000))),
        ("grpc.max_reconnect_backoff_ms", max(1, round(backoff.max_s * 1000))),
    )


class _WatchChannel:
    """The one channel of a watch; opened anew only when its TLS files change on disk."""

    def __init__(
        self, target: str, tls: TlsFiles | None, options: tuple[tuple[str, str | int], ...]
    ) -> None:
        self._target = target
        self._tls = tls
        self._options = options
        self._channel: grpc.aio.Channel | None = None
        self._signature: Signature | None = None

    async def current(self) -> grpc.aio.Channel:
        """The channel; raises `OrchestratorError` when TLS files cannot be read."""
        signature = self._tls.signature() if self._tls is not None else None
        if self._channel is None or signature != self._signature:
            await self.close()
            self._channel = aio_channel(self._target, self._tls, self._options)
            self._signature = signature
        return self._channel

    async def close(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close()
