"""`ExternalCheckerActor`: an `ExternalReplicaChecker` over a share of the external pools, in a Ray
actor of its own.

For a small external fleet the control plane's own checker scrapes every endpoint from its
process. Past `ENDPOINTS_PER_CHECKER` configured endpoints the control plane starts one of these
per share of about that many endpoints (`checker_shares`: small pools whole, a large one cut
into index ranges; replica ids stay `<pool>-<index>`), spread
over the cluster's nodes, so no one process parses every page each second, and keeps only the
replicas registered over gRPC to itself. Each reports to the cluster's named `Registry`, as replica
actors do.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import ray

from orchestrator.config.schema import OrchestratorConfig, PoolSpec
from orchestrator.controlplane.external_pools import (
    DEFAULT_CHECK_INTERVAL_S,
    ExternalReplicaChecker,
    external_registrations,
)
from orchestrator.core.records import EngineKind

log = logging.getLogger(__name__)

# One process parses about this many 35 KB vLLM pages a second in a few percent of a core
# (docs/benchmarks.md, fleet scale).
ENDPOINTS_PER_CHECKER: Final = 64


@dataclass(frozen=True, slots=True)
class CheckerShare:
    """The external endpoints one checker actor checks: `replica_ids` of `config`'s pools (whole
    pool specs, so each endpoint keeps its `<pool>-<index>` id)."""

    config: OrchestratorConfig
    replica_ids: frozenset[str]

    @classmethod
    def whole(cls, config: OrchestratorConfig) -> CheckerShare:
        """Every configured external endpoint of `config`."""
        return cls(config, frozenset(r.replica_id for r in external_registrations(config)))


def checker_shares(
    config: OrchestratorConfig, per_checker: int = ENDPOINTS_PER_CHECKER
) -> list[CheckerShare]:
    """The configured external endpoints cut into shares of at most `per_checker` each (small
    pools packed whole, a larger one cut into even index ranges); no share at all while every
    external endpoint together is within `per_checker`: the control plane's own checker is enough
    then. None either with `controlPlane.replicaTls`: its files are mounted in the control
    plane's pod only (the Helm chart), so an actor elsewhere could verify no replica."""
    external = [p for p in config.pools if p.engine is EngineKind.EXTERNAL and p.endpoints]
    endpoints = sum(len(p.endpoints) for p in external)
    if endpoints <= per_checker:
        return []
    if config.control_plane.replica_tls is not None:
        log.warning(
            "checking all %d external endpoints in the control plane's process, not in checker"
            " actors: the replicaTls files are only there",
            endpoints,
        )
        return []
    pieces: list[tuple[PoolSpec, range]] = []
    for pool in external:
        count = len(pool.endpoints)
        cuts = max(1, math.ceil(count / max(1, per_checker)))
        bounds = [count * i // cuts for i in range(cuts + 1)]
        pieces += [(pool, range(start, stop)) for start, stop in itertools.pairwise(bounds)]
    shares: list[list[tuple[PoolSpec, range]]] = [[]]
    for piece in pieces:
        if shares[-1] and sum(len(r) for _, r in shares[-1]) + len(piece[1]) > per_checker:
            shares.append([])
        shares[-1].append(piece)
    return [_share(config, share) for share in shares]


def _share(config: OrchestratorConfig, pieces: list[tuple[PoolSpec, range]]) -> CheckerShare:
    pools = tuple(dict.fromkeys(pool for pool, _ in pieces))
    ids = frozenset(f"{pool.name}-{index}" for pool, indices in pieces for index in indices)
    return CheckerShare(config.model_copy(update={"pools": pools}), ids)


class ExternalChecker:
    """Ray actor class: checks the external endpoints of `share` until stopped."""

    def __init__(
        self,
        share: CheckerShare,
        registry: Any,
        interval_s: float = DEFAULT_CHECK_INTERVAL_S,
    ) -> None:
        self._checker = ExternalReplicaChecker(
            share.config,
            registry,
            interval_s=interval_s,
            include_registered=False,
            only=share.replica_ids,
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> int:
        """Start checking, unless it already does (the control plane calls it again after a
        restart of this actor, or after its checks died of an error, which is logged); returns
        this actor's process id (for measuring what it costs)."""
        task = self._task
        if task is not None and task.done() and not task.cancelled():
            log.error("external checks stopped; starting them again", exc_info=task.exception())
        if task is None or task.done():
            self._task = asyncio.create_task(self._checker.run())
        return os.getpid()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


async def start_checkers(starts: Iterable[Awaitable[object]], timeout_s: float) -> None:
    """Tell every checker actor to start, all at once and for `timeout_s` at most: one that is
    restarting or on a lost node is told again next time and holds none of the others up."""
    tasks = [asyncio.ensure_future(start) for start in starts]
    if not tasks:
        return
    done, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in pending:
        task.cancel()
    failed = [task.exception() for task in done if task.exception() is not None]
    if pending or failed:
        log.warning(
            "%d of %d external checker actors not started (%d not within %g s): %s",
            len(pending) + len(failed), len(tasks), len(pending), timeout_s,
            "; ".join(str(exc) for exc in failed[:3]) or "timed out",
        )  # fmt: skip


ExternalCheckerActor = ray.remote(num_cpus=0, max_restarts=-1, scheduling_strategy="SPREAD")(
    ExternalChecker
)
