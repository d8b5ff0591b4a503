"""`ExternalCheckerActor`: an `ExternalReplicaChecker` over a share of the external pools, in a Ray
actor of its own.

The control plane's own checker scrapes every external endpoint from one process; for a large
external fleet, one of these per pool (or per group of pools) spreads the page parsing over
processes, and with placement over nodes, so no one process parses every page each second. Each
reports to the cluster's named `Registry`, as replica actors do.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import ray

from orchestrator.config.schema import OrchestratorConfig
from orchestrator.controlplane.external_pools import (
    DEFAULT_CHECK_INTERVAL_S,
    ExternalReplicaChecker,
)


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
        """Start checking; returns this actor's process id (for measuring what it costs)."""
        if self._task is None:
            self._task = asyncio.create_task(self._checker.run())
        return os.getpid()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


ExternalCheckerActor = ray.remote(num_cpus=0)(ExternalChecker)
