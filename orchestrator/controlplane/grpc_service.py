"""The `ControlPlaneService` gRPC server: `orchestrator.controlplane.v1` over a `Registry` handle.

Every call is one registry call (a node health report: one per Ray node it covers); the
registry's canonical errors become gRPC statuses here, and a registry that is restarting is
UNAVAILABLE, so callers retry rather than hang.

A node health report names a node the way its reporter knows it. The embedded stack's reporters
know the Ray node id replicas register with; an exporter on a Kubernetes node knows only the
node's name, which the chart gives the Ray worker pods on it as the `k8s-node` Ray label. So a
report for `name` is recorded for `name` itself and for every live Ray node labelled with it
(`NodeNames`). A name that matches no Ray node is accepted and kept under that name, affecting
no replica: the exporter of a GPU node whose Ray worker has not joined yet (or that runs only
external replicas) is not an error, and its next report (every few seconds) reaches the worker
once it has joined.

Health-only callers: every node's exporter holds a client certificate, so a stolen node must not
be able to re-register, drain or scale the fleet. A caller whose certificate names (subject CN or
a DNS SAN) one of `health_only_clients` may call only `ReportNodeHealth`; every other call,
reads included (the table and status name every replica's address), is PERMISSION_DENIED.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, Final, NoReturn, TypeVar

import grpc
import ray

from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2 as pb
from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2_grpc as pb_grpc
from orchestrator.controlplane.grpc_translate import (
    delta_to_pb,
    health_from_pb,
    registration_from_pb,
    status_to_pb,
    table_to_pb,
)
from orchestrator.controlplane.placement import K8S_NODE_LABEL
from orchestrator.core.errors import GRPC_STATUS_NAME, ErrorCode, OrchestratorError
from orchestrator.security.files import TlsFiles
from orchestrator.security.grpc_tls import server_credentials
from orchestrator.table.snapshot import LoadDelta, RoutingTable

log = logging.getLogger(__name__)

# The long poll's length: a watch stream re-polls this often when nothing changes.
WATCH_POLL_S: Final = 10.0
_CALL_TIMEOUT_S: Final = 15.0
# How long one listing of Ray's nodes answers node-name lookups: reporters on every node refresh
# every few seconds, and each would otherwise list the whole cluster.
NODE_LIST_MAX_AGE_S: Final = 1.0
_T = TypeVar("_T")
# gRPC's keepalive pings from routers' watch channels (every 10 s): allow them down to 5 s apart,
# also with no call open, so the server does not answer them with GOAWAY too_many_pings.
SERVER_OPTIONS: Final = (
    ("grpc.http2.min_ping_interval_without_data_ms", 5000),
    ("grpc.keepalive_permit_without_calls", 1),
)
_HEALTH_ONLY_METHODS: Final = frozenset({"ReportNodeHealth"})


class NodeNames:
    """Which Ray nodes a node name covers: the node with that id, and the live nodes whose
    `k8s-node` label is that name. `list_nodes` is `ray.nodes` (a blocking GCS call: call
    `ray_node_ids` off the event loop); its answer is reused for `max_age_s`."""

    def __init__(
        self,
        list_nodes: Callable[[], list[dict[str, Any]]] = ray.nodes,
        *,
        max_age_s: float = NODE_LIST_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._list_nodes = list_nodes
        self._max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._listed_at_s = float("-inf")
        self._by_name: dict[str, tuple[str, ...]] = {}

    def ray_node_ids(self, name: str) -> tuple[str, ...]:
        """The ids of the live Ray nodes `name` covers; empty when none (or Ray cannot say)."""
        with self._lock:
            if self._clock() - self._listed_at_s >= self._max_age_s:
                self._refresh()
            return self._by_name.get(name, ())

    def _refresh(self) -> None:
        try:
            nodes = self._list_nodes()
        except Exception as exc:  # GCS briefly unreachable: the report still lands under its name
            log.warning("listing Ray nodes to resolve node names failed: %s", exc)
            return
        by_name: dict[str, list[str]] = {}
        for node in nodes:
            if not node.get("Alive"):
                continue
            node_id = str(node["NodeID"])
            by_name.setdefault(node_id, []).append(node_id)
            label = (node.get("Labels") or {}).get(K8S_NODE_LABEL)
            if label and label != node_id:
                by_name.setdefault(str(label), []).append(node_id)
        self._by_name = {name: tuple(ids) for name, ids in by_name.items()}
        self._listed_at_s = self._clock()


def peer_identities(auth_context: Mapping[str, Iterable[bytes]]) -> frozenset[str]:
    """The names a caller's verified client certificate carries: its subject CN and SANs."""
    names: set[str] = set()
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        names.update(value.decode(errors="replace") for value in auth_context.get(key, ()))
    return frozenset(names)


class ControlPlaneServicer(pb_grpc.ControlPlaneServiceServicer):
    def __init__(
        self,
        registry: Any,
        node_names: NodeNames | None = None,
        health_only_clients: Iterable[str] = (),
    ) -> None:
        self._registry = registry
        self._node_names = node_names if node_names is not None else NodeNames()
        self._health_only = frozenset(health_only_clients)

    async def _authorize(self, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """Abort with PERMISSION_DENIED when a health-only caller calls anything else."""
        if not self._health_only or method in _HEALTH_ONLY_METHODS:
            return
        matched = peer_identities(context.auth_context()) & self._health_only
        if matched:
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"client certificate {sorted(matched)[0]!r} is health-only"
                f" (--tls-health-only-client): it may call ReportNodeHealth, not {method}",
            )

    async def WatchRoutingTable(
        self, request: pb.WatchRoutingTableRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.RoutingTableSnapshot]:
        await self._authorize("WatchRoutingTable", context)
        if request.with_loads:
            async for message in self._watch_with_loads(context):
                yield message
            return
        after = request.after_version
        while True:
            table: RoutingTable = await _call(
                self._registry.wait_for_version.remote(after, WATCH_POLL_S),
                context,
                WATCH_POLL_S + _CALL_TIMEOUT_S,
            )
            if table.version > after:
                after = table.version
                yield table_to_pb(table, with_loads=False)

    async def _watch_with_loads(
        self, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.RoutingTableSnapshot]:
        """A whole snapshot first, whatever the client has (its loads may be old), then each newer
        snapshot and, in between, the load deltas."""
        table: RoutingTable = await _call(
            self._registry.wait_for_version.remote(0, WATCH_POLL_S),
            context,
            WATCH_POLL_S + _CALL_TIMEOUT_S,
        )
        after, after_load = table.version, table.load_version
        yield table_to_pb(table)
        while True:
            change: RoutingTable | LoadDelta = await _call(
                self._registry.wait_for_change.remote(after, after_load, WATCH_POLL_S),
                context,
                WATCH_POLL_S + _CALL_TIMEOUT_S,
            )
            if isinstance(change, RoutingTable):
                after, after_load = change.version, change.load_version
                yield table_to_pb(change)
            elif change.loads:
                after_load = change.load_version
                yield delta_to_pb(change)

    async def RegisterReplica(
        self, request: pb.RegisterReplicaRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RegisterReplicaResponse:
        await self._authorize("RegisterReplica", context)
        try:
            registration = registration_from_pb(request)
        except OrchestratorError as exc:
            await _abort(context, exc)
        version: int = await _call(self._registry.register_replica.remote(registration), context)
        return pb.RegisterReplicaResponse(version=version)

    async def DeregisterReplica(
        self, request: pb.DeregisterReplicaRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeregisterReplicaResponse:
        await self._authorize("DeregisterReplica", context)
        known: bool = await _call(self._registry.deregister_replica.remote(request.id), context)
        return pb.DeregisterReplicaResponse(known=known)

    async def ReportNodeHealth(
        self, request: pb.ReportNodeHealthRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ReportNodeHealthResponse:
        """Record the health for the node as named and for each Ray node that name covers."""
        if not request.node.strip():
            await _abort(
                context,
                OrchestratorError(
                    ErrorCode.INVALID_ARGUMENT,
                    "a node name (Kubernetes node name or Ray node id) is required",
                    param="node",
                ),
            )
        health = health_from_pb(request.health)
        covered = await asyncio.to_thread(self._node_names.ray_node_ids, request.node)
        if not covered:
            log.debug("node %r matches no live Ray node; its health is kept by name", request.node)
        for key in dict.fromkeys((request.node, *covered)):
            await _call(self._registry.report_node_health.remote(key, health), context)
        return pb.ReportNodeHealthResponse()

    async def Drain(
        self, request: pb.DrainRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DrainResponse:
        await self._authorize("Drain", context)
        ids: tuple[str, ...] = await _call(self._registry.drain.remote(request.target), context)
        return pb.DrainResponse(replica_ids=ids)

    async def Scale(
        self, request: pb.ScaleRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ScaleResponse:
        await self._authorize("Scale", context)
        await _call(self._registry.scale.remote(request.pool, request.replicas), context)
        return pb.ScaleResponse()

    async def GetStatus(
        self, request: pb.GetStatusRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetStatusResponse:
        await self._authorize("GetStatus", context)
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
    await context.abort(grpc.StatusCode[GRPC_STATUS_NAME[error.code]], details)
    raise AssertionError("context.abort raises")


async def start_control_plane_server(
    registry: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    tls: TlsFiles | None = None,
    node_names: NodeNames | None = None,
    health_only_clients: Iterable[str] = (),
) -> tuple[grpc.aio.Server, int]:
    """A started gRPC server for `registry`, and the port it bound (port 0 picks one).

    `tls` serves TLS only; with its client CA, every caller must present a certificate that CA
    signed (routers and operators alike), or the handshake fails. A caller whose certificate
    names one of `health_only_clients` may only report node health."""
    credentials = None if tls is None else server_credentials(tls)
    server = grpc.aio.server(options=SERVER_OPTIONS)
    servicer = ControlPlaneServicer(registry, node_names, health_only_clients)
    add_control_plane_servicer(servicer, server)
    address = f"{host}:{port}"
    if credentials is None:
        bound = server.add_insecure_port(address)
    else:
        bound = server.add_secure_port(address, credentials)
    await server.start()
    return server, bound
