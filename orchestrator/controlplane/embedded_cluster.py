"""The Ray cluster a control plane runs on: a local one made from the config, or an existing one.

`orchestrator up` and `orchestrator control-plane` without `--ray-address` start a local cluster
with one Ray node per (site, generation) of the config (`placement.node_groups`), each with room to
scale its pools up; `stop()` removes every node it started, so no raylet, GCS or worker outlives it.
A local cluster listens on loopback only: an unauthenticated GCS reachable from the network runs
anyone's code. Kept here because only `controlplane/` imports `ray`.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Final

import ray
from ray._private import ray_constants
from ray.cluster_utils import Cluster

from orchestrator.config.schema import OrchestratorConfig
from orchestrator.controlplane.placement import NodeGroup, node_groups
from orchestrator.controlplane.registry import NAMESPACE

HEADROOM: Final = 2
"""Each local node offers this many times the GPU slots its pools need at their configured size,
so `orchestrator scale` has somewhere to place new replicas."""

LOOPBACK: Final = "127.0.0.1"
"""The address of every node of a local cluster, so its GCS, raylets, object managers, agents and
workers bind to loopback instead of every interface."""
_RESOLVE_LOCALHOST_ENV: Final = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_START_ATTEMPTS = 2
_STARTUP_TIMEOUT = "timed out during startup"
# A node that dies is noticed within about 2 s (the default takes 30 s).
_FAST_FAILURE_DETECTION: Final = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 3,
}


def keep_clients_on_loopback() -> None:
    """Make Ray clients here and in the processes started from here keep 127.0.0.1 as given.

    Ray rewrites a 127.0.0.1 address to the host's interface address before it connects (so a
    laptop's cluster can take other machines), where a loopback-only GCS does not answer. Its one
    switch for that rewrite is `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, read when `ray` is imported:
    set it for the nodes and workers this process starts, and in the constant this process
    already read. It changes nothing for an address that is not loopback (`connect()`).
    """
    os.environ[_RESOLVE_LOCALHOST_ENV] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


def local_node_groups(config: OrchestratorConfig) -> list[NodeGroup]:
    """The nodes of the local cluster: `node_groups(config)` with `HEADROOM` times the slots."""
    return [replace(group, gpu_slots=group.gpu_slots * HEADROOM) for group in node_groups(config)]


class RayConnection:
    """This process's connection to Ray, and the local cluster behind it when it started one."""

    def __init__(self, cluster: Cluster | None, address: str) -> None:
        self._cluster = cluster
        self.address = address

    @classmethod
    def start_local(
        cls, config: OrchestratorConfig, *, namespace: str = NAMESPACE
    ) -> RayConnection:
        """Start a head node and one node per group of `config`, then connect to them.

        Blocks until every node has joined. On failure, whatever was started is stopped again.
        """
        keep_clients_on_loopback()
        for attempt in range(1, _START_ATTEMPTS + 1):
            cluster = Cluster(
                initialize_head=True,
                head_node_args={
                    "num_cpus": 1,
                    "include_dashboard": False,
                    "node_ip_address": LOOPBACK,
                    "_system_config": _FAST_FAILURE_DETECTION,
                },
                shutdown_at_exit=True,
            )
            try:
                for group in local_node_groups(config):
                    cluster.add_node(num_cpus=1, node_ip_address=LOOPBACK, **group.ray_node_args())
                ray.init(address=cluster.address, namespace=namespace, log_to_driver=False)
            except BaseException as error:
                ray.shutdown()
                cluster.shutdown()
                # Ray gives a raylet a fixed 30 s to register; a loaded machine can miss it once.
                if _STARTUP_TIMEOUT in str(error) and attempt < _START_ATTEMPTS:
                    continue
                raise
            return cls(cluster, cluster.address)
        raise AssertionError("unreachable")

    @classmethod
    def connect(cls, address: str, *, namespace: str = NAMESPACE) -> RayConnection:
        """Join an existing cluster (`ray start` or KubeRay); `stop()` then only disconnects."""
        ray.init(address=address, namespace=namespace, log_to_driver=False)
        return cls(None, address)

    @property
    def session_dir(self) -> str | None:
        """The local cluster's session directory (every process of it mentions it); else None."""
        if self._cluster is None or self._cluster.head_node is None:
            return None
        path: Any = self._cluster.head_node.get_session_dir_path()
        return str(path)

    def stop(self) -> None:
        """Disconnect, and stop every node of the local cluster if this process started it."""
        ray.shutdown()
        if self._cluster is not None:
            self._cluster.shutdown()
            self._cluster = None
