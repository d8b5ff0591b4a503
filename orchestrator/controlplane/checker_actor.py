"""`ExternalCheckerActor`: an `ExternalReplicaChecker` over a share of the external pools, in a Ray
actor of its own.

For a small external fleet the control plane's own checker scrapes every endpoint from its
process. Past `ENDPOINTS_PER_CHECKER` configured endpoints the control plane starts one of these
per share of pools (`checker_shares`: whole pools, so replica ids stay `<pool>-<index>`), spread
over the cluster's nodes, so no one process parses every page each second, and keeps only the
replicas registered over gRPC to itself. Each reports to the cluster's named `Registry`, as replica
actors do.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Final

import ray

from orchestrator.config.schema import OrchestratorConfig, PoolSpec
from orchestrator.controlplane.external_pools import (
    DEFAULT_CHECK_INTERVAL_S,
    ExternalReplicaChecker,
)
from orchestrator.core.records import EngineKind

# One process parses about this many 35 KB vLLM pages a second in a few percent of a core
# (docs/benchmarks.md, fleet scale).
ENDPOINTS_PER_CHECKER: Final = 64


def checker_shares(
    config: OrchestratorConfig, per_checker: int = ENDPOINTS_PER_CHECKER
) -> list[OrchestratorConfig]:
    """`config` cut into shares of whole external pools of about `per_checker` endpoints each (a
    larger pool is a share of its own); no share at all while every external endpoint together
    is within `per_checker`: the control plane's own checker is enough then."""
    external = [p for p in config.pools if p.engine is EngineKind.EXTERNAL and p.endpoints]
    if sum(len(p.endpoints) for p in external) <= per_checker:
        return []
    shares: list[list[PoolSpec]] = [[]]
    for pool in external:
        if shares[-1] and sum(len(p.endpoints) for p in shares[-1]) + len(pool.endpoints) > (
            per_checker
        ):
            shares.append([])
        shares[-1].append(pool)
    return [config.model_copy(update={"pools": tuple(share)}) for share in shares]


class ExternalChecker:
    """Ray actor class: checks the external pools of `config` until stopped."""

    def __init__(
        self,
        config: OrchestratorConfig,
        registry: Any,
        interval_s: float = DEFAULT_CHECK_INTERVAL_S,
    ) -> None:
        self._checker = ExternalReplicaChecker(
            config, registry, interval_s=interval_s, include_registered=False
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> int:
        """Start checking, unless it already does (the control plane calls it again after a
        restart of this actor); returns this actor's process id (for measuring what it costs)."""
        if self._task is None:
            self._task = asyncio.create_task(self._checker.run())
        return os.getpid()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


ExternalCheckerActor = ray.remote(num_cpus=0, max_restarts=-1, scheduling_strategy="SPREAD")(
    ExternalChecker
)
