"""Prometheus HTTP service discovery of the engines, served from the registry's routing table.

Static scrape targets written at start miss every replica placed later (a `scale`, a replacement
after a node loss), and in Kubernetes engines listen on ports chosen inside Ray worker pods. So the
control plane, which knows every replica, answers `GET /sd/engines` with Prometheus's
`http_sd_configs` document: one target group per registered replica, labelled like the static
targets (`sd_targets.py`). When the registry does not answer, the reply is a 503 and Prometheus
keeps the targets of its last successful refresh.

With the control plane's TLS files the endpoint is served over mutual TLS with the same server
certificate and client CA (Prometheus presents a client certificate in `tls_config`); without
them, over plain HTTP on the control plane's host.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import ray
from aiohttp import web

from orchestrator.controlplane.placement import K8S_NODE_LABEL
from orchestrator.controlplane.sd_targets import engine_target_groups
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.openai_errors import openai_error
from orchestrator.security.files import TlsFiles
from orchestrator.security.http_tls import ReloadingServerContext
from orchestrator.table.snapshot import RoutingTable

log = logging.getLogger(__name__)

ENGINES_PATH: Final = "/sd/engines"
_REGISTRY_TIMEOUT_S: Final = 5.0
# Prometheus re-reads the list every few seconds; Ray's node table changes far less often.
NODE_LIST_MAX_AGE_S: Final = 5.0


class EngineDiscovery:
    """Builds the engines' target groups from the registry on every request.

    The `node` label is the name the node's exporter labels its own series with, so engine and
    exporter series of one node join: a Ray node's `k8s-node` label (the Kubernetes node name the
    chart gives worker pods), else `node_names` (Ray node id → name), else the Ray node id.
    `node_names` may be replaced at any time: `orchestrator up` sets it once its simulated nodes
    have names. Ray's node list (a blocking GCS call, made off the loop) is reused for
    `max_age_s`; when it cannot be read, the last one is.
    """

    def __init__(
        self,
        registry: Any,
        node_names: Mapping[str, str] | None = None,
        *,
        list_nodes: Callable[[], list[dict[str, Any]]] = ray.nodes,
        max_age_s: float = NODE_LIST_MAX_AGE_S,
    ) -> None:
        self._registry = registry
        self.node_names: Mapping[str, str] = dict(node_names or {})
        self._list_nodes = list_nodes
        self._max_age_s = max_age_s
        self._labelled: dict[str, str] = {}
        self._listed_at_s = float("-inf")

    async def target_groups(self) -> list[dict[str, Any]]:
        table: RoutingTable = await asyncio.wait_for(
            self._registry.snapshot.remote(), _REGISTRY_TIMEOUT_S
        )
        if time.monotonic() - self._listed_at_s >= self._max_age_s:
            await asyncio.to_thread(self._refresh_labels)
        names = {**self.node_names, **self._labelled}
        return engine_target_groups(table.replicas, names)

    def _refresh_labels(self) -> None:
        try:
            nodes = self._list_nodes()
        except Exception as error:
            log.warning("service discovery: listing Ray nodes failed: %s", error)
            return
        self._labelled = {
            str(node["NodeID"]): str(label)
            for node in nodes
            if (label := (node.get("Labels") or {}).get(K8S_NODE_LABEL))
        }
        self._listed_at_s = time.monotonic()

    async def handle_engines(self, request: web.Request) -> web.Response:
        try:
            groups = await self.target_groups()
        except Exception as error:  # the registry restarting, or Ray unreachable
            log.warning("service discovery: the registry did not answer: %s", error)
            return _error(ErrorCode.UNAVAILABLE, "the registry did not answer; retry")
        return web.json_response(groups)


class HttpSdServer:
    """The discovery endpoint on `host:port` (0 picks a free port); `start` returns the port."""

    def __init__(self, discovery: EngineDiscovery, *, tls: TlsFiles | None = None) -> None:
        self.discovery = discovery
        self._tls = tls
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def scheme(self) -> str:
        return "http" if self._tls is None else "https"

    async def start(self, host: str, port: int) -> int:
        app = web.Application()
        app.router.add_get(ENGINES_PATH, self.discovery.handle_engines)
        app.router.add_route("*", "/{tail:.*}", _not_found)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        ssl_context = None if self._tls is None else ReloadingServerContext(self._tls).context
        try:
            listening = _listen(host, port)  # bound here, so a port 0 is known at once
            await web.SockSite(runner, listening, ssl_context=ssl_context).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(listening.getsockname()[1])
        return self.port

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listening = socket.socket(family, socket.SOCK_STREAM)
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind((host, port))
    except BaseException:
        listening.close()
        raise
    return listening


async def _not_found(request: web.Request) -> web.Response:
    if request.method != "GET":
        return _error(ErrorCode.METHOD_NOT_ALLOWED, f"{request.method} is not served here")
    return _error(
        ErrorCode.NOT_FOUND, f"no such path {request.path!r}; engines: GET {ENGINES_PATH}"
    )


def _error(code: ErrorCode, message: str) -> web.Response:
    status, body = openai_error(OrchestratorError(code, message))
    return web.json_response(body, status=status)
