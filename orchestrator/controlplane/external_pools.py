"""External replicas: endpoints that run elsewhere, health-checked and heartbeated on their behalf.

An external replica has no actor to heartbeat for it, so the control plane does what a
`ReplicaActor` does for its engine: each check of its `/health` that passes is a heartbeat carrying
the load from its `/metrics`. A check that fails sends nothing, so the registry lists the replica
`unhealthy` after `heartbeat_timeout_s`, as it would a silent actor; it is ready again on the next
check that passes. Two kinds are checked alike: the endpoints of external pools in config
(registered once they first answer, and again after a registry restart), and replicas registered
over gRPC (`RegisterReplica`), which the checker finds in the registry each pass; those stay until
deregistered, and must register again after a registry restart, since only their owner knows them.

`https://` replicas are verified against the CA of `controlPlane.replicaTls` (else the system's
trust store), and are shown its client certificate when one is given; the files are re-read when
they change, so a rotated CA or certificate takes effect on the next pass.

The checks go through the router's HTTP/1.1 client (`forwarding/upstream.py`: llhttp, kept-alive
connections), not aiohttp's: a checker reads one `/health` and one `/metrics` page per replica
every second, and aiohttp's client spent more CPU on that than the parse (`bench/checker_cost.py`:
0.44x the CPU per check with this one; docs/benchmarks.md, session 16). aiohttp stays for the rare
read of an engine's version at registration.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import aiohttp

from orchestrator.config.schema import ClientTlsSpec, OrchestratorConfig, PoolSpec
from orchestrator.controlplane.engine_version import read_engine_version
from orchestrator.controlplane.metrics_page import read_age_s
from orchestrator.controlplane.registry_records import RegistryStatus, ReplicaRegistration
from orchestrator.core.errors import OrchestratorError
from orchestrator.core.records import EngineKind, ReplicaLoad
from orchestrator.engines import EngineAdapter, adapter_for
from orchestrator.engines.metrics import MAX_PAGE_BYTES
from orchestrator.forwarding.upstream import UpstreamPool
from orchestrator.forwarding.upstream_response import UpstreamError
from orchestrator.forwarding.upstream_settings import UpstreamSettings
from orchestrator.security.files import Signature, TlsFiles
from orchestrator.security.http_tls import client_context

log = logging.getLogger(__name__)

DEFAULT_CHECK_INTERVAL_S: Final = 1.0
_CHECK_TIMEOUT_S: Final = 2.0
_HEALTH_BYTES: Final = 64 * 1024  # a health answer longer than this fails the check
# How long a round gathers read pages before reporting them: one registry call per checker per
# tenth of a second at most, against a tenth of a second more age.
REPORT_EVERY_S: Final = 0.1

# A passed check: the replica, its load (None: unreadable, and why), time.monotonic() at the read.
_Beat = tuple[ReplicaRegistration, ReplicaLoad | None, str, float]


def external_registrations(config: OrchestratorConfig) -> list[ReplicaRegistration]:
    """One registration per endpoint of each external pool; ids are `<pool>-<index>`."""
    return [
        _registration(pool, index, url)
        for pool in config.pools
        if pool.engine is EngineKind.EXTERNAL
        for index, url in enumerate(pool.endpoints)
    ]


def replica_tls_files(spec: ClientTlsSpec | None) -> TlsFiles | None:
    """The files `controlPlane.replicaTls` names, None when unset (plaintext and public CAs)."""
    if spec is None:
        return None
    return TlsFiles(
        cert=None if spec.cert_file is None else Path(spec.cert_file),
        key=None if spec.key_file is None else Path(spec.key_file),
        ca=None if spec.ca_file is None else Path(spec.ca_file),
        flag="--replica-tls",
    )


def _registration(pool: PoolSpec, index: int, url: str) -> ReplicaRegistration:
    return ReplicaRegistration(
        replica_id=f"{pool.name}-{index}",
        url=url,
        pool=pool.name,
        site=pool.site,
        generation=pool.generation,
        engine=EngineKind.EXTERNAL,
        external=True,
    )


class ExternalReplicaChecker:
    """Checks every external replica (configured or registered) each `interval_s`, all at once.

    `replica_tls` None takes config's `controlPlane.replicaTls`. `include_registered=False`
    checks only the configured endpoints: a checker over a share of the pools (`checker_actor`)
    leaves those registered over gRPC to the control plane's own, which is then
    `include_configured=False`; `only` (replica ids) keeps that share's configured endpoints."""

    def __init__(
        self,
        config: OrchestratorConfig,
        registry: Any,
        *,
        interval_s: float = DEFAULT_CHECK_INTERVAL_S,
        replica_tls: TlsFiles | None = None,
        include_registered: bool = True,
        include_configured: bool = True,
        only: frozenset[str] | None = None,
    ) -> None:
        self._include_registered = include_registered
        self._replica_tls = replica_tls or replica_tls_files(config.control_plane.replica_tls)
        configured = [
            r for r in external_registrations(config) if only is None or r.replica_id in only
        ]
        self._configured = configured if include_configured else []
        self._configured_ids = frozenset(r.replica_id for r in configured)
        self._registry = registry
        self._interval_s = interval_s

    async def run(self) -> None:
        """Check until cancelled; connections last while the replica TLS files stay unchanged
        (then every one is closed, so the next pass shows the new files)."""
        while True:
            signature = self._tls_signature()
            self._warn_if_tls_unusable()
            pool = UpstreamPool(UpstreamSettings(replica_tls=self._replica_tls))
            await pool.start()
            try:
                while signature == self._tls_signature():
                    started = time.monotonic()
                    registered = await self._registered() if self._include_registered else []
                    checks = [*self._configured, *registered]
                    await self._round(pool, checks)
                    # replicas gone since (pods of a restarted pool get new addresses) leave
                    # the pool too, their idle connections closed
                    pool.forget_except({r.url for r in checks})
                    # Once per interval, however long the checks took: load ages stay bounded.
                    await asyncio.sleep(max(0.0, self._interval_s - (time.monotonic() - started)))
            finally:
                await pool.close()
            log.info("replica TLS files changed; checking with the new ones")

    async def _round(self, pool: UpstreamPool, checks: list[ReplicaRegistration]) -> None:
        """Check all at once and report what has been read every `REPORT_EVERY_S` as it comes
        in, not the whole round at its end: a load's age counts from its scrape, and a round of
        many pages on a busy host takes a good part of the interval."""
        pending = {asyncio.ensure_future(self._check(pool, r)) for r in checks}
        try:
            while pending:
                done, pending = await asyncio.wait(pending, timeout=REPORT_EVERY_S)
                beats = [beat for task in done if (beat := task.result()) is not None]
                await self._report(beats)
        finally:
            for task in pending:
                task.cancel()

    def _warn_if_tls_unusable(self) -> None:
        """Files caught mid-rotation: every `https` check then fails (closed, trusting no
        one) until they change; said once per change, not once per check."""
        if self._replica_tls is None:
            return
        try:
            client_context(self._replica_tls)
        except OrchestratorError as error:
            log.warning("replica TLS files unusable, https checks fail: %s", error.message)

    def _session(self) -> aiohttp.ClientSession:
        timeout = aiohttp.ClientTimeout(total=_CHECK_TIMEOUT_S)
        if self._replica_tls is None:
            return aiohttp.ClientSession(timeout=timeout)
        try:
            context = client_context(self._replica_tls)
        except OrchestratorError as error:
            # Caught mid-rotation: fail closed (a context that trusts no one) until they change.
            log.warning("replica TLS files unusable, https checks fail: %s", error.message)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        connector = aiohttp.TCPConnector(ssl=context)
        return aiohttp.ClientSession(timeout=timeout, connector=connector)

    def _tls_signature(self) -> Signature | None:
        return None if self._replica_tls is None else self._replica_tls.signature()

    async def _registered(self) -> list[ReplicaRegistration]:
        """External replicas the registry lists beyond the configured ones (registered over gRPC);
        none while the registry does not answer."""
        try:
            status: RegistryStatus = await asyncio.wait_for(
                self._registry.status.remote(), _CHECK_TIMEOUT_S
            )
        except Exception as exc:  # the registry restarting: check the configured ones meanwhile
            log.debug("could not list registered external replicas: %s", exc)
            return []
        registrations = (entry.record.registration for entry in status.replicas)
        return [r for r in registrations if r.external and r.replica_id not in self._configured_ids]

    async def _check(self, pool: UpstreamPool, registration: ReplicaRegistration) -> _Beat | None:
        """The heartbeat a passed check makes; `None` when the replica failed it."""
        try:
            load, problem, read_at_s = await probe(
                pool, registration.url, adapter_for(registration.engine)
            )
        # ValueError: a registered URL no connection can be made to (`http://a..b:8000`): that
        # replica fails its checks, the others go on
        except (UpstreamError, TimeoutError, OrchestratorError, ValueError, _CheckFailed) as exc:
            log.debug("external replica %s failed its check: %s", registration.replica_id, exc)
            return None
        return registration, load, problem, read_at_s

    async def _report(self, beats: list[_Beat]) -> None:
        """One registry call for the whole round (one per replica would cost the registry a Ray
        call each); configured replicas it does not know are registered, with the version their
        engine states."""
        if not beats:
            return
        try:
            replies = await self._registry.heartbeat_many.remote(
                [
                    (registration.replica_id, load, problem, read_age_s(load, read_at_s))
                    for registration, load, problem, read_at_s in beats
                ]
            )
            unknown = [
                registration
                for (registration, *_), reply in zip(beats, replies, strict=True)
                if not reply.known and registration.replica_id in self._configured_ids
            ]
            if unknown:
                async with self._session() as session:
                    for registration in unknown:
                        version = await read_engine_version(
                            session, registration.url, adapter_for(registration.engine)
                        )
                        await self._registry.register_replica.remote(
                            replace(registration, engine_version=version)
                        )
        except Exception as exc:  # the registry restarting: the next round registers again
            log.warning("could not report %d external replicas: %s", len(beats), exc)


class _CheckFailed(Exception):
    """The replica answered its health check with something other than 2xx."""


async def _get(pool: UpstreamPool, url: str, path: str, limit: int) -> tuple[int, bytes]:
    """(status, body) of `GET path` on the replica at `url`, the body within `limit` bytes;
    raises `UpstreamError` (no connection, a broken or oversized answer) or `TimeoutError`."""
    response = await pool.get(
        url, path, timeout_s=_CHECK_TIMEOUT_S, connect_timeout_s=_CHECK_TIMEOUT_S
    )
    try:
        return response.status, await response.read(limit)
    finally:
        response.release()


async def probe(
    pool: UpstreamPool, url: str, adapter: EngineAdapter
) -> tuple[ReplicaLoad | None, str, float]:
    """Raises unless `/health` answers 2xx (redirects are not followed); then the load, or
    `None` and why `/metrics` could not be read (the load is unknown then, never idle), and
    `time.monotonic()` when it was read."""
    status, _ = await _get(pool, url, adapter.health_path, _HEALTH_BYTES)
    if not 200 <= status < 300:
        raise _CheckFailed(f"{adapter.health_path} answered {status}")
    try:
        status, page = await _get(pool, url, "/metrics", MAX_PAGE_BYTES)
        read_at_s = time.monotonic()
        if status != 200:
            return None, f"/metrics: answered {status}", read_at_s
        return (
            adapter.parse_load(page.decode("utf-8", errors="replace"), time.time()),
            "",
            read_at_s,
        )
    except (UpstreamError, TimeoutError, ValueError) as exc:
        return None, f"/metrics: {exc or type(exc).__name__}", time.monotonic()
