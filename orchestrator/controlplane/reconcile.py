"""Pool reconciliation as a pure function: (desired pools, observed replicas, nodes) → actions.

The Ray side (`PoolReconciler`) observes the cluster, calls `reconcile`, and carries the actions
out; this module only decides, so every rule below is tested without Ray.

Rules, for each pool the control plane starts (`external` pools, and any replica observed in one,
get no actions: those replicas run elsewhere and are only health-checked):

1. A replica on a node that is dead, or no longer listed, is forgotten (`ForgetReplica`): it can be
   neither drained nor stopped, and it no longer counts towards its pool.
2. A replica that is `gone` on a live node (it finished draining, or its engine exited) is stopped
   (`StopReplica`), releasing its actor and GPUs. Nothing else is ever stopped: a serving replica
   is drained first, and stopped once it reports `gone`.
3. A pool's size is the number of its `starting` and `ready` replicas on live nodes; `draining`
   replicas are on their way out and do not count.
4. Below its desired size, a pool gets new replicas (`StartReplica`) on live nodes whose `site`
   label is the pool's site, whose Ray accelerator type (`AMD-Instinct-MI355X-OAM`) normalises
   through `parse_generation` to the pool's generation, and that have `gpus_per_replica` GPUs free.
   Each goes to the fitting node with the fewest replicas of that pool, then the most free GPUs,
   then the smallest node id; the GPUs it takes stay taken for the rest of this pass, and pools
   are served in the order given, so an earlier pool wins a contested node. Replicas that fit
   nowhere are reported once per pool (`Unplaceable`), naming what is missing: a live node in the
   site, a node of the generation there, or free GPUs on those nodes.
5. Above its desired size, a pool drains (`DrainReplica`) exactly its surplus: replicas still
   `starting` first (they serve nothing yet), then the most recently ready (largest `since_s`;
   unknown counts as oldest; ties by replica id, largest first). A pool at 0 drains them all.
6. Replicas of a pool that is no longer desired drain (and stop once gone), as at size 0.

The output order is deterministic: the pools in the order given, then undesired pools by name; in
each pool `ForgetReplica` and `StopReplica` (each by replica id), then `DrainReplica` (in drain
order), then `StartReplica` (in placement order), then `Unplaceable`. Carrying the actions out and
reconciling again yields nothing new, apart from the same `Unplaceable` reports while the cluster
still lacks room.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeAlias

from orchestrator.config.schema import OrchestratorConfig, PoolSpec
from orchestrator.core.errors import UnknownGenerationError
from orchestrator.core.generations import Generation, parse_generation
from orchestrator.core.records import EngineKind


class ObservedState(StrEnum):
    """Where a launched replica is, as the control plane last observed it."""

    STARTING = "starting"  # its actor exists; the engine is not yet healthy
    READY = "ready"  # serving
    DRAINING = "draining"  # finishing what it has, taking nothing new
    GONE = "gone"  # drained, or its engine exited: only its actor is left to stop


@dataclass(frozen=True, slots=True)
class ObservedReplica:
    """One replica the control plane launched.

    `node` is the Ray node id it was placed on. `since_s` is when it entered `state`, on the control
    plane's clock; `None` means unknown and sorts as the oldest.
    """

    replica_id: str
    pool: str
    node: str
    state: ObservedState
    since_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.state, ObservedState):
            try:
                object.__setattr__(self, "state", ObservedState(self.state))
            except ValueError:
                allowed = ", ".join(s.value for s in ObservedState)
                raise ValueError(
                    f"unknown replica state {self.state!r}; states: {allowed}"
                ) from None


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A Ray node as placement sees it.

    `site` is the node's `site` label (`None` when it has none); `accelerator_type` is Ray's name
    for its GPUs (`"AMD-Instinct-MI355X-OAM"`), `None` for a node without GPUs; a name no
    generation matches makes the node match no pool. `gpus_free` counts whole GPUs not yet taken.
    """

    node_id: str
    site: str | None
    accelerator_type: str | None
    gpus_free: int
    alive: bool = True


@dataclass(frozen=True, slots=True)
class StartReplica:
    """Start one replica of `pool` on `node`."""

    pool: str
    node: str


@dataclass(frozen=True, slots=True)
class DrainReplica:
    """Stop sending new requests to the replica; it finishes what it has, then reports `gone`."""

    replica_id: str


@dataclass(frozen=True, slots=True)
class StopReplica:
    """Stop the replica's actor and engine; issued only once it is `gone`."""

    replica_id: str


@dataclass(frozen=True, slots=True)
class ForgetReplica:
    """Drop the replica from the registry: its node died, so there is nothing left to stop."""

    replica_id: str


class Missing(StrEnum):
    """What a pool lacks to place a replica, first unmet need first."""

    SITE = "site"  # no live node carries the pool's site label
    GENERATION = "generation"  # nodes in the site, but none of the pool's generation
    GPUS = "gpus"  # nodes of the generation in the site, without enough free GPUs


@dataclass(frozen=True, slots=True)
class Unplaceable:
    """`count` replicas of `pool` fit on no node; `reason` says why, for an operator to read."""

    pool: str
    missing: Missing
    reason: str
    count: int = 1


Action: TypeAlias = StartReplica | DrainReplica | StopReplica | ForgetReplica | Unplaceable

_SERVING = frozenset({ObservedState.STARTING, ObservedState.READY})


def reconcile(
    desired: OrchestratorConfig | Sequence[PoolSpec],
    observed: Sequence[ObservedReplica],
    nodes: Sequence[NodeInfo],
) -> list[Action]:
    """The actions that bring the observed replicas to the desired pools (rules: module docstring).

    Raises ValueError when the inputs contradict themselves: two pools, replicas or nodes sharing a
    name or id.
    """
    pools = tuple(desired.pools if isinstance(desired, OrchestratorConfig) else desired)
    _require_unique("pool name", (pool.name for pool in pools))
    _require_unique("replica id", (replica.replica_id for replica in observed))
    _require_unique("node id", (node.node_id for node in nodes))
    live = {node.node_id: node for node in nodes if node.alive}
    free = {node.node_id: node.gpus_free for node in live.values()}
    external = {pool.name for pool in pools if pool.engine is EngineKind.EXTERNAL}
    by_pool: dict[str, list[ObservedReplica]] = {}
    for replica in observed:
        if replica.pool not in external:
            by_pool.setdefault(replica.pool, []).append(replica)
    actions: list[Action] = []
    for pool in pools:
        if pool.engine is not EngineKind.EXTERNAL:
            replicas = by_pool.pop(pool.name, [])
            actions += _reconcile_pool(pool.name, pool, replicas, live, free)
    for name in sorted(by_pool):
        actions += _reconcile_pool(name, None, by_pool[name], live, free)
    return actions


def _reconcile_pool(
    name: str,
    pool: PoolSpec | None,
    replicas: list[ObservedReplica],
    live: Mapping[str, NodeInfo],
    free: dict[str, int],
) -> list[Action]:
    """One pool's actions; `pool` is `None` for a pool no longer desired (size 0)."""
    # Validation makes `replicas` an int for every launched pool; `or 0` only satisfies the type.
    size = (pool.replicas or 0) if pool is not None else 0
    by_id = sorted(replicas, key=lambda r: r.replica_id)
    actions: list[Action] = [ForgetReplica(r.replica_id) for r in by_id if r.node not in live]
    on_live = [r for r in by_id if r.node in live]
    actions += [StopReplica(r.replica_id) for r in on_live if r.state is ObservedState.GONE]
    serving = [r for r in on_live if r.state in _SERVING]
    if len(serving) > size:
        surplus = _drain_order(serving)[: len(serving) - size]
        actions += [DrainReplica(r.replica_id) for r in surplus]
    elif len(serving) < size and pool is not None:
        actions += _place(pool, size - len(serving), serving, live, free)
    return actions


def _drain_order(serving: list[ObservedReplica]) -> list[ObservedReplica]:
    """Starting before ready; then newest first (unknown `since_s` last); then largest id first."""
    by_id_descending = sorted(serving, key=lambda r: r.replica_id, reverse=True)
    return sorted(
        by_id_descending,
        key=lambda r: (
            r.state is not ObservedState.STARTING,
            r.since_s is None,
            -(r.since_s or 0.0),
        ),
    )


def _place(
    pool: PoolSpec,
    wanted: int,
    serving: list[ObservedReplica],
    live: Mapping[str, NodeInfo],
    free: dict[str, int],
) -> list[Action]:
    matching = [
        node
        for node in live.values()
        if node.site == pool.site and _generation(node) is pool.generation
    ]
    per_node = Counter(replica.node for replica in serving)
    actions: list[Action] = []
    for _ in range(wanted):
        fits = [node for node in matching if free[node.node_id] >= pool.gpus_per_replica]
        if not fits:
            short = wanted - len(actions)
            actions.append(_unplaceable(pool, short, live, matching, free))
            break
        node = min(fits, key=lambda n: (per_node[n.node_id], -free[n.node_id], n.node_id))
        free[node.node_id] -= pool.gpus_per_replica
        per_node[node.node_id] += 1
        actions.append(StartReplica(pool.name, node.node_id))
    return actions


def _unplaceable(
    pool: PoolSpec,
    short: int,
    live: Mapping[str, NodeInfo],
    matching: list[NodeInfo],
    free: Mapping[str, int],
) -> Unplaceable:
    what = f"{short} replica{'s' if short > 1 else ''} of pool {pool.name!r} fit on no node: "
    in_site = sorted(
        (node for node in live.values() if node.site == pool.site), key=lambda n: n.node_id
    )
    if not in_site:
        sites = sorted({node.site for node in live.values() if node.site})
        return Unplaceable(
            pool.name,
            Missing.SITE,
            what + f"no live node is in site {pool.site!r}"
            f" (live nodes are in: {', '.join(sites) or 'no labelled site'})",
            short,
        )
    if not matching:
        types = sorted({node.accelerator_type or "no GPUs" for node in in_site})
        return Unplaceable(
            pool.name,
            Missing.GENERATION,
            what + f"no live node in site {pool.site!r} has {pool.generation.value} GPUs"
            f" (there: {', '.join(types)})",
            short,
        )
    gpus = ", ".join(
        f"{node.node_id}: {free[node.node_id]}"
        for node in sorted(matching, key=lambda n: n.node_id)
    )
    return Unplaceable(
        pool.name,
        Missing.GPUS,
        what + f"each replica needs {pool.gpus_per_replica} free {pool.generation.value}"
        f" GPU{'s' if pool.gpus_per_replica > 1 else ''} in site {pool.site!r};"
        f" free now: {gpus}",
        short,
    )


def _generation(node: NodeInfo) -> Generation | None:
    if not node.accelerator_type:
        return None
    try:
        return parse_generation(node.accelerator_type)
    except UnknownGenerationError:
        return None


def _require_unique(what: str, values: Iterable[str]) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"{what} {value!r} appears twice; each must be unique")
        seen.add(value)
