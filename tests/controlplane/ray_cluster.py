"""Start a multi-node Ray cluster for tests, retrying when a loaded machine makes a raylet miss
Ray's fixed 30 s start-up window (the start, not the code under test, is what failed then)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import ray
from ray.cluster_utils import Cluster

ATTEMPTS = 3
STARTUP_TIMEOUT = "timed out during startup"


def start_cluster(
    head_node_args: Mapping[str, Any], add_nodes: Callable[[Cluster], dict[Any, Any]]
) -> tuple[Cluster, dict[Any, Any]]:
    """A cluster with its head and the nodes `add_nodes` adds; the last failure is raised."""
    for attempt in range(1, ATTEMPTS + 1):
        cluster: Cluster | None = None
        try:
            cluster = Cluster(initialize_head=True, head_node_args=dict(head_node_args))
            return cluster, add_nodes(cluster)
        except Exception as error:
            if cluster is not None:
                ray.shutdown()
                cluster.shutdown()
            if STARTUP_TIMEOUT not in str(error) or attempt == ATTEMPTS:
                raise
    raise AssertionError("unreachable")
