"""The operator's side of the control plane: `status`, `drain` and `scale` over gRPC.

Errors split by who must act: a request the control plane refuses (unknown pool, bad size) is the
caller's to fix and raises `OrchestratorError` (exit 2); a control plane that does not answer raises
`ControlPlaneUnreachable` (exit 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, TypeVar

import grpc

from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2 as pb
from orchestrator._proto.orchestrator.controlplane.v1 import controlplane_pb2_grpc as pb_grpc
from orchestrator.config.router_timing import DEFAULT_LOAD_STALE_AFTER_S
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.security.files import TlsFiles
from orchestrator.security.grpc_tls import channel_credentials

CALL_TIMEOUT_S: Final = 10.0

_REFUSED: Final = {
    grpc.StatusCode.NOT_FOUND: ErrorCode.NOT_FOUND,
    grpc.StatusCode.INVALID_ARGUMENT: ErrorCode.INVALID_ARGUMENT,
}
_STATE_NAMES: Final = {
    pb.REPLICA_STATE_READY: "ready",
    pb.REPLICA_STATE_DRAINING: "draining",
    pb.REPLICA_STATE_UNHEALTHY: "unhealthy",
}
_HEALTH_NAMES: Final = {
    pb.NODE_HEALTH_UNSPECIFIED: "healthy",
    pb.NODE_HEALTH_HEALTHY: "healthy",
    pb.NODE_HEALTH_DEGRADED: "degraded",
    pb.NODE_HEALTH_UNHEALTHY: "unhealthy",
}

T = TypeVar("T")


class ControlPlaneUnreachable(Exception):
    """The control plane did not answer (not running, wrong address, or restarting)."""


@dataclass(frozen=True, slots=True)
class PoolRow:
    """A pool's desired size (`None` for external pools) next to the replicas ready in it;
    `unplaceable` says why it cannot reach that size (empty when it can); `capacity_steps` counts
    the step changes found in its learned capacity, the last of them `last_step_ratio`× (None
    before any)."""

    name: str
    site: str
    generation: str
    engine: str
    desired: int | None
    ready: int
    unplaceable: str = ""
    capacity_steps: int = 0
    last_step_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class ReplicaRow:
    """One replica as `status` shows it; `capacity_tokens_per_s` is the control plane's estimate
    (its prior until heartbeats teach it; wall clock), 0 once the replica is gone. `state` is the
    control plane's view (ready, draining, gone) unless the routing table marks it unhealthy.
    `load` says whether routers may believe its load: "fresh", "stale" (older than
    `LOAD_STALE_AFTER_S`: routers treat it as unknown), "unknown" (its page is an adapter error,
    `adapter_error`) or "none" (no heartbeat yet); `load_age_s` is `None` without a report.
    `engine_version` is what its engine states ("" when it states none or the replica is gone)."""

    id: str
    pool: str
    site: str
    generation: str
    state: str
    capacity_tokens_per_s: float
    running: int
    waiting: int
    kv_cache_usage: float
    health: str
    heartbeat_age_s: float
    load: str = "none"
    load_age_s: float | None = None
    adapter_errors: int = 0
    adapter_error: str = ""
    engine_version: str = ""


@dataclass(frozen=True, slots=True)
class Status:
    version: int
    pools: list[PoolRow]
    replicas: list[ReplicaRow]

    @property
    def sites(self) -> list[str]:
        return sorted({p.site for p in self.pools} | {r.site for r in self.replicas})

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "sites": self.sites,
            "pools": [asdict(p) for p in self.pools],
            "replicas": [asdict(r) for r in self.replicas],
        }


# Matches the routers' default bound (`RouterSettings.load_stale_after_s`).
LOAD_STALE_AFTER_S = DEFAULT_LOAD_STALE_AFTER_S


class ControlPlaneClient:
    """Blocking calls to the control plane at `target` ("host:port"), each bounded in time."""

    def __init__(
        self, target: str, *, timeout_s: float = CALL_TIMEOUT_S, tls: TlsFiles | None = None
    ) -> None:
        self.target = target
        self._timeout_s = timeout_s
        self._tls = tls

    def status(self) -> Status:
        response = self._call(lambda stub: stub.GetStatus(pb.GetStatusRequest(), **self._opts))
        return status_from_pb(response)

    def drain(self, target: str) -> list[str]:
        """Drain a pool (its size becomes 0) or one replica; returns the replica ids covered."""
        response = self._call(lambda stub: stub.Drain(pb.DrainRequest(target=target), **self._opts))
        return list(response.replica_ids)

    def scale(self, pool: str, replicas: int) -> None:
        request = pb.ScaleRequest(pool=pool, replicas=replicas)
        self._call(lambda stub: stub.Scale(request, **self._opts))

    @property
    def _opts(self) -> dict[str, Any]:
        return {"timeout": self._timeout_s}

    def _call(self, call: Callable[[Any], T]) -> T:
        channel = (
            grpc.insecure_channel(self.target)
            if self._tls is None
            else grpc.secure_channel(self.target, channel_credentials(self._tls))
        )
        with channel:
            stub: Any = pb_grpc.ControlPlaneServiceStub(channel)  # type: ignore[no-untyped-call]
            try:
                return call(stub)
            except grpc.RpcError as error:
                code: grpc.StatusCode = error.code()
                details: str = error.details() or code.name
                if code in _REFUSED:
                    raise OrchestratorError(_REFUSED[code], details) from None
                raise ControlPlaneUnreachable(
                    f"control plane at {self.target} is unreachable ({code.name}: {details}); "
                    "is `orchestrator up` or `orchestrator control-plane` running there?"
                ) from None


def status_from_pb(response: Any) -> Status:
    """`GetStatusResponse` as rows; a gone replica takes its site and generation from its pool."""
    pools = {p.name: p for p in response.pools}
    replicas = []
    for entry in response.replicas:
        pool = pools.get(entry.pool)
        listed = entry.HasField("replica")
        row = entry.replica
        state = entry.observed_state
        if listed and row.state == pb.REPLICA_STATE_UNHEALTHY:
            state = _STATE_NAMES[row.state]
        report = entry.load if entry.HasField("load") else None
        capacity = row.capacity_prior_tokens_per_s if listed else 0.0
        if listed and report is not None and report.capacity_tokens_per_s > 0:
            capacity = report.capacity_tokens_per_s
        replicas.append(
            ReplicaRow(
                id=entry.id,
                pool=entry.pool,
                site=row.site if listed else (pool.site if pool else ""),
                generation=row.generation if listed else (pool.generation if pool else ""),
                state=state,
                capacity_tokens_per_s=capacity,
                running=entry.running,
                waiting=entry.waiting,
                kv_cache_usage=entry.kv_cache_usage,
                health=_HEALTH_NAMES.get(row.node_health, "healthy") if listed else "-",
                heartbeat_age_s=entry.heartbeat_age_s,
                load=_load_word(report),
                load_age_s=None if report is None else report.age_s,
                adapter_errors=0 if report is None else report.adapter_errors_total,
                adapter_error="" if report is None else report.adapter_error,
                engine_version=row.engine_version if listed else "",
            )
        )
    rows = [
        PoolRow(
            name=p.name,
            site=p.site,
            generation=p.generation,
            engine=p.engine,
            desired=p.replicas if p.HasField("replicas") else None,
            ready=sum(r.pool == p.name and r.state == "ready" for r in replicas),
            unplaceable=p.unplaceable,
            capacity_steps=p.capacity_step_changes,
            last_step_ratio=p.last_capacity_step_ratio or None,
        )
        for p in response.pools
    ]
    return Status(version=response.version, pools=rows, replicas=replicas)


def _load_word(report: Any) -> str:
    if report is None:
        return "none"
    if not report.known:
        return "unknown"
    return "stale" if report.age_s > LOAD_STALE_AFTER_S else "fresh"


def format_status(status: Status) -> str:
    """Sites, then pools, then replicas, as aligned text tables."""
    pools = _table(
        ("POOL", "SITE", "GENERATION", "ENGINE", "DESIRED", "READY"),
        [
            (p.name, p.site, p.generation, p.engine, "-" if p.desired is None else str(p.desired),
             str(p.ready))
            for p in status.pools
        ],
    )  # fmt: skip
    replicas = _table(
        ("REPLICA", "POOL", "SITE", "GENERATION", "STATE", "CAPACITY tok/s", "RUNNING", "WAITING",
         "KV", "LOAD", "HEALTH", "HEARTBEAT"),
        [
            (r.id, r.pool, r.site, r.generation, r.state, f"{r.capacity_tokens_per_s:.0f}",
             *_load_cells(r), r.health, f"{r.heartbeat_age_s:.1f}s ago")
            for r in status.replicas
        ],
    )  # fmt: skip
    below = [f"{p.name} is below size: {p.unplaceable}" for p in status.pools if p.unplaceable]
    below += [
        f"{r.id}: load unknown after {r.adapter_errors} unreadable pages: {r.adapter_error}"
        for r in status.replicas
        if r.load == "unknown"
    ]
    return "\n".join(
        [
            f"routing table version {status.version}; sites: {', '.join(status.sites) or '-'}",
            "",
            pools,
            *below,
            "",
            replicas if status.replicas else "no replicas",
        ]
    )


def _load_cells(row: ReplicaRow) -> tuple[str, str, str, str]:
    """RUNNING, WAITING, KV and LOAD: a load routers cannot believe shows no figures."""
    if row.load in ("unknown", "none"):
        return "-", "-", "-", row.load
    figures = (str(row.running), str(row.waiting), f"{row.kv_cache_usage:.0%}")
    return (*figures, f"{row.load} {row.load_age_s or 0.0:.1f}s")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = [header, *rows]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )
