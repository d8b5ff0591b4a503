"""The `ControlPlaneService` gRPC server: `orchestrator.controlplane.v1` over a `Registry` handle.

Every call is one registry call; the registry's canonical errors become gRPC statuses here, and a
registry that is restarting is UNAVAILABLE, so callers retry rather than hang.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from types import MappingProxyType
from typing import Any, Final, NoReturn, TypeVar

import grpc
import ray

from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2 as pb
from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2_grpc as pb_grpc
from orchestrator.controlplane.grpc_translate import (
    health_from_pb,
    registration_from_pb,
    status_to_pb,
    table_to_pb,
)
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.table.snapshot import RoutingTable

# The long poll's length: a watch stream re-polls this often when nothing changes.
WATCH_POLL_S: Final = 10.0
_CALL_TIMEOUT_S: Final = 15.0
# The codes the registry raises; anything else is a bug.
_STATUS: Final = MappingProxyType(
    {
        ErrorCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
        ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
        ErrorCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    }
)

_T = TypeVar("_T")


class ControlPlaneServicer(pb_grpc.ControlPlaneServiceServicer):
    def __init__(self, registry: Any) -> None:
        self._registry = registry

    async def WatchRoutingTable(
        self, request: pb.WatchRoutingTableRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.RoutingTableSnapshot]:
        after = request.after_version
        while True:
            table: RoutingTable = await _call(
                self._registry.wait_for_version.remote(after, WATCH_POLL_S),
                context,
                WATCH_POLL_S + _CALL_TIMEOUT_S,
            )
            if table.version > after:
                after = table.version
                yield table_to_pb(table)

    async def RegisterReplica(
        self, request: pb.RegisterReplicaRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RegisterReplicaResponse:
        try:
            registration = registration_from_pb(request)
        except OrchestratorError as exc:
            await _abort(context, exc)
        version: int = await _call(self._registry.register_replica.remote(registration), context)
        return pb.RegisterReplicaResponse(version=version)

    async def DeregisterReplica(
        self, request: pb.DeregisterReplicaRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeregisterReplicaResponse:
        known: bool = await _call(self._registry.deregister_replica.remote(request.id), context)
        return pb.DeregisterReplicaResponse(known=known)

    async def ReportNodeHealth(
        self, request: pb.ReportNodeHealthRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ReportNodeHealthResponse:
        health = health_from_pb(request.health)
        await _call(self._registry.report_node_health.remote(request.node, health), context)
        return pb.ReportNodeHealthResponse()

    async def Drain(
        self, request: pb.DrainRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DrainResponse:
        ids: tuple[str, ...] = await _call(self._registry.drain.remote(request.target), context)
        return pb.DrainResponse(replica_ids=ids)

    async def Scale(
        self, request: pb.ScaleRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ScaleResponse:
        await _call(self._registry.scale.remote(request.pool, request.replicas), context)
        return pb.ScaleResponse()

    async def GetStatus(
        self, request: pb.GetStatusRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetStatusResponse:
        return status_to_pb(await _call(self._registry.status.remote(), context))


# The generated registration function is untyped; this is its contract.
add_control_plane_servicer: Callable[[ControlPlaneServicer, grpc.aio.Server], None] = (
    pb_grpc.add_ControlPlaneServiceServicer_to_server
)


async def _call(
    ref: Awaitable[_T], context: grpc.aio.ServicerContext[Any, Any], timeout_s: float = 0.0
) -> _T:
    """Await one registry call; its errors become the call's gRPC status."""
    try:
        return await asyncio.wait_for(ref, timeout_s or _CALL_TIMEOUT_S)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, OrchestratorError):
            await _abort(context, exc.cause)
        raise
    except (ray.exceptions.RayActorError, TimeoutError):
        await _abort(
            context,
            OrchestratorError(ErrorCode.UNAVAILABLE, "the registry is restarting; retry shortly"),
        )


async def _abort(context: grpc.aio.ServicerContext[Any, Any], error: OrchestratorError) -> NoReturn:
    details = f"{error.param}: {error.message}" if error.param else error.message
    await context.abort(_STATUS.get(error.code, grpc.StatusCode.INTERNAL), details)
    raise AssertionError("context.abort raises")


async def start_control_plane_server(
    registry: Any, host: str = "127.0.0.1", port: int = 0
) -> tuple[grpc.aio.Server, int]:
    """A started gRPC server for `registry`, and the port it bound (port 0 picks one)."""
    server = grpc.aio.server()
    add_control_plane_servicer(ControlPlaneServicer(registry), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    return server, bound
