"""A router's side of `WatchRoutingTable`: keep a `TableHolder` following the control plane.

The holder keeps the last table it got whenever the control plane is unreachable (stale, not
stopped: routers go on serving from it), and the watch reconnects, asking only for versions newer
than the one it holds. With a `LoadSink` (the router), the watch asks for loads too: each
snapshot's loads and each delta between snapshots go to the sink, dated on the sink's clock
(`clock`) from the age the control plane gives them, so no two machines' clocks are compared.
Needs no Ray: it is gRPC and translation only. With TLS files, each (re)connection reads them
afresh, so a rotated client certificate is used from the next one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Final, Protocol

import grpc

from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2 as pb
from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2_grpc as pb_grpc
from orchestrator.controlplane.grpc_translate import delta_from_pb, table_from_pb
from orchestrator.core.errors import OrchestratorError
from orchestrator.core.records import LoadReport
from orchestrator.security.files import TlsFiles
from orchestrator.security.grpc_tls import aio_channel
from orchestrator.table.source import TableHolder

log = logging.getLogger(__name__)

DEFAULT_RETRY_S: Final = 1.0
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
) -> None:
    """Feed `holder` (and `loads`, if given) from the control plane at `target` ("host:port")
    until cancelled. The table is installed before its loads are handed on, so the sink knows
    every replica they name."""
    while True:
        try:
            async with aio_channel(target, tls, WATCH_CHANNEL_OPTIONS) as channel:
                stub: Any = pb_grpc.ControlPlaneServiceStub(channel)  # type: ignore[no-untyped-call]
                request = pb.WatchRoutingTableRequest(
                    after_version=holder.snapshot().version, with_loads=loads is not None
                )
                async for message in stub.WatchRoutingTable(request):
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
                "control plane at %s unreachable (%s); serving routing table version %d until"
                " it is back",
                target, exc.code().name, holder.snapshot().version,
            )  # fmt: skip
        except OrchestratorError as error:  # TLS files unreadable mid-rotation: retry
            log.warning("control plane TLS files: %s", error.message)
        await asyncio.sleep(retry_s)
