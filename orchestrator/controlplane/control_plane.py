"""`ControlPlane`: registry, reconcile loop, external checks, gRPC service and, when asked for,
the engines' Prometheus service discovery (`http_sd.py`), run together.

What `orchestrator control-plane` and `orchestrator up` run once connected to a Ray cluster. The
reconcile loop blocks on Ray calls, so it runs in a thread of its own, off the gRPC event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any, Final

import grpc
import ray

from orchestrator.config.schema import OrchestratorConfig
from orchestrator.controlplane.checker_actor import (
    ENDPOINTS_PER_CHECKER,
    ExternalCheckerActor,
    checker_shares,
    start_checkers,
)
from orchestrator.controlplane.external_pools import ExternalReplicaChecker
from orchestrator.controlplane.grpc_service import start_control_plane_server
from orchestrator.controlplane.http_sd import ENGINES_PATH, EngineDiscovery, HttpSdServer
from orchestrator.controlplane.kubernetes_pools import KubernetesPools
from orchestrator.controlplane.reconciler import DEFAULT_INTERVAL_S, PoolReconciler
from orchestrator.controlplane.registry import NAMESPACE, REGISTRY_NAME, start_registry
from orchestrator.security.files import TlsFiles

log = logging.getLogger(__name__)

_JOIN_TIMEOUT_S: Final = 30.0
# How often the checker actors are told to check: after Ray restarts one (its node lost), it
# starts again within this.
_CHECKERS_KEPT_S: Final = 5.0


class ControlPlane:
    """Owns what it starts: `stop()` stops the replicas it launched and its server.

    The registry is detached and outlives `stop()` unless `stop(remove_registry=True)`: a control
    plane process that restarts finds it, with the replicas still registered. `sd_port` (0: a free
    one) serves the engines' HTTP service discovery on `host`, with `tls` like the gRPC service;
    `None` serves none. `uses_real_gpus` `None` derives it per pool from its engine (placement.py).
    Past `endpoints_per_checker` configured external endpoints, their checks run in checker
    actors (`checker_actor.py`), one per share of pools, and this process checks only the
    replicas registered over gRPC.
    """

    def __init__(
        self,
        config: OrchestratorConfig,
        *,
        namespace: str = NAMESPACE,
        registry_name: str = REGISTRY_NAME,
        host: str = "127.0.0.1",
        port: int | None = None,
        reconcile_interval_s: float = DEFAULT_INTERVAL_S,
        uses_real_gpus: bool | None = None,
        tls: TlsFiles | None = None,
        sd_port: int | None = None,
        health_only_clients: tuple[str, ...] = (),
        endpoints_per_checker: int = ENDPOINTS_PER_CHECKER,
    ) -> None:
        self._config = config
        self._endpoints_per_checker = endpoints_per_checker
        self._checkers: list[Any] = []
        self._tls = tls
        self._health_only_clients = health_only_clients
        self._namespace = namespace
        self._registry_name = registry_name
        self._host = host
        self._port = config.control_plane.grpc_port if port is None else port
        self._interval_s = reconcile_interval_s
        self._uses_real_gpus = uses_real_gpus
        self._sd_port = sd_port
        self._sd_server: HttpSdServer | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._server: grpc.aio.Server | None = None
        self._checking: asyncio.Task[None] | None = None
        self._discovering: asyncio.Task[None] | None = None
        self.registry: Any = None
        self.reconciler: PoolReconciler | None = None

    async def start(self) -> int:
        """Start everything (Ray must be connected); returns the gRPC port bound."""
        self.registry = start_registry(
            self._config, name=self._registry_name, namespace=self._namespace
        )
        self.reconciler = PoolReconciler(
            self.registry,
            model=self._config.model,
            namespace=self._namespace,
            uses_real_gpus=self._uses_real_gpus,
        )
        self._thread = threading.Thread(
            target=self.reconciler.run,
            args=(self._stop, self._interval_s),
            name="pool-reconciler",
            daemon=True,
        )
        self._thread.start()
        self._checking = asyncio.create_task(self._check_external(), name="external-checks")
        discovery = KubernetesPools(self._config, self.registry)  # pools with a selector
        self._discovering = asyncio.create_task(discovery.run(), name="kubernetes-pools")
        if self._sd_port is not None:
            self._sd_server = HttpSdServer(EngineDiscovery(self.registry), tls=self._tls)
            await self._sd_server.start(self._host, self._sd_port)
        self._server, bound = await start_control_plane_server(
            self.registry,
            self._host,
            self._port,
            self._tls,
            health_only_clients=self._health_only_clients,
        )
        return bound

    async def _check_external(self) -> None:
        """The external replicas' checks: here, or in checker actors kept checking."""
        shares = checker_shares(self._config, self._endpoints_per_checker)
        if not shares:
            await ExternalReplicaChecker(self._config, self.registry).run()
            return
        self._checkers = [ExternalCheckerActor.remote(share, self.registry) for share in shares]
        registered = ExternalReplicaChecker(self._config, self.registry, include_configured=False)
        checking_registered = asyncio.create_task(registered.run())
        try:
            while True:
                starts = [checker.start.remote() for checker in self._checkers]
                await start_checkers(starts, _CHECKERS_KEPT_S)
                await asyncio.sleep(_CHECKERS_KEPT_S)
        finally:
            checking_registered.cancel()
            for checker in self._checkers:
                ray.kill(checker, no_restart=True)
            self._checkers = []

    @property
    def checker_actors(self) -> tuple[Any, ...]:
        """The external checks' actors while they run; none while this process checks them all."""
        return tuple(self._checkers)

    @property
    def discovery(self) -> EngineDiscovery | None:
        """The engines' service discovery, while it is served."""
        return None if self._sd_server is None else self._sd_server.discovery

    @property
    def sd_url(self) -> str | None:
        """The engines' `http_sd_configs` URL, while it is served."""
        server = self._sd_server
        if server is None:
            return None
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{server.scheme}://{host}:{server.port}{ENGINES_PATH}"

    async def stop(self, *, remove_registry: bool = False) -> None:
        if self._server is not None:
            await self._server.stop(grace=1.0)
        if self._sd_server is not None:
            await self._sd_server.stop()
        for task in (self._checking, self._discovering):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, _JOIN_TIMEOUT_S)
        if self.reconciler is not None:
            await asyncio.to_thread(self.reconciler.shutdown)
        if remove_registry and self.registry is not None:
            ray.kill(self.registry, no_restart=True)
