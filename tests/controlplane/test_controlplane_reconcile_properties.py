"""Reconcile over random clusters: what holds for every observed state, not only the drawn ones."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st
from reconcile_world import MI300X, MI355X, apply, node, pool, replica

from orchestrator.config import PoolSpec
from orchestrator.controlplane.reconcile import (
    DrainReplica,
    ForgetReplica,
    NodeInfo,
    ObservedReplica,
    ObservedState,
    StartReplica,
    StopReplica,
    Unplaceable,
    reconcile,
)
from orchestrator.core.errors import UnknownGenerationError
from orchestrator.core.generations import parse_generation

ACCELERATORS = [MI300X, MI355X, "AMD-Instinct-MI325X-OAM", "NVIDIA-H100", None]
POOL_SHAPES = [
    ("kr-mi300x", "kr", "MI300X", 1),
    ("us-mi355x", "us", "MI355X", 1),
    ("us-mi355x-wide", "us", "MI355X", 2),
    ("us-mi300x", "us", "MI300X", 1),
]


@dataclass(frozen=True)
class World:
    pools: list[PoolSpec]
    observed: list[ObservedReplica]
    nodes: list[NodeInfo]


@st.composite
def worlds(draw: st.DrawFn) -> World:
    shapes = draw(st.lists(st.sampled_from(POOL_SHAPES), unique=True, max_size=4))
    pools = [
        pool(name, site, generation, draw(st.integers(0, 5)), gpus)
        for name, site, generation, gpus in shapes
    ]
    nodes = [
        node(
            f"n{i}",
            draw(st.sampled_from(["kr", "us", "eu", None])),
            draw(st.sampled_from(ACCELERATORS)),
            gpus_free=draw(st.integers(0, 4)),
            alive=draw(st.booleans()),
        )
        for i in range(draw(st.integers(0, 6)))
    ]
    pool_names = [name for name, *_ in POOL_SHAPES] + ["retired"]
    node_ids = [n.node_id for n in nodes] + ["vanished"]
    observed = [
        replica(
            f"r{i}",
            draw(st.sampled_from(pool_names)),
            draw(st.sampled_from(node_ids)),
            draw(st.sampled_from([s.value for s in ObservedState])),
            draw(st.none() | st.floats(0, 100)),
        )
        for i in range(draw(st.integers(0, 12)))
    ]
    return World(pools, observed, nodes)


def serving(world: World, pool_name: str) -> int:
    live = {n.node_id for n in world.nodes if n.alive}
    return sum(
        1
        for r in world.observed
        if r.pool == pool_name
        and r.node in live
        and r.state in (ObservedState.STARTING, ObservedState.READY)
    )


def matches(node_info: NodeInfo, spec: PoolSpec) -> bool:
    try:
        generation = parse_generation(node_info.accelerator_type or "")
    except UnknownGenerationError:
        return False
    return node_info.alive and node_info.site == spec.site and generation is spec.generation


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_replicas_are_never_placed_on_a_node_that_does_not_match_or_has_no_room(
    world: World,
) -> None:
    actions = reconcile(world.pools, world.observed, world.nodes)
    specs = {p.name: p for p in world.pools}
    nodes = {n.node_id: n for n in world.nodes}
    taken: Counter[str] = Counter()
    for action in actions:
        if isinstance(action, StartReplica):
            assert matches(nodes[action.node], specs[action.pool])
            taken[action.node] += specs[action.pool].gpus_per_replica
    assert all(taken[n] <= nodes[n].gpus_free for n in taken)


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_a_pool_never_exceeds_its_size_and_drains_only_its_surplus(world: World) -> None:
    actions = reconcile(world.pools, world.observed, world.nodes)
    pool_of = {r.replica_id: r.pool for r in world.observed}
    for spec in world.pools:
        desired, before = spec.replicas or 0, serving(world, spec.name)
        starts = sum(1 for a in actions if isinstance(a, StartReplica) and a.pool == spec.name)
        drains = sum(
            1 for a in actions if isinstance(a, DrainReplica) and pool_of[a.replica_id] == spec.name
        )
        unplaced = sum(
            a.count for a in actions if isinstance(a, Unplaceable) and a.pool == spec.name
        )
        assert drains == max(0, before - desired)  # at size, or below it: no drain
        assert starts + unplaced == max(0, desired - before)
        assert before + starts - drains <= desired


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_only_gone_replicas_are_stopped_and_only_those_on_lost_nodes_forgotten(
    world: World,
) -> None:
    actions = reconcile(world.pools, world.observed, world.nodes)
    live = {n.node_id for n in world.nodes if n.alive}
    by_id = {r.replica_id: r for r in world.observed}
    for action in actions:
        if isinstance(action, StopReplica):
            assert by_id[action.replica_id].state is ObservedState.GONE
            assert by_id[action.replica_id].node in live
        elif isinstance(action, ForgetReplica):
            assert by_id[action.replica_id].node not in live
    touched = [a.replica_id for a in actions if not isinstance(a, StartReplica | Unplaceable)]
    assert len(touched) == len(set(touched))


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_reconciling_after_the_actions_are_carried_out_only_repeats_what_cannot_be_placed(
    world: World,
) -> None:
    actions = reconcile(world.pools, world.observed, world.nodes)
    observed, nodes = apply(actions, world.pools, world.observed, world.nodes)
    again = reconcile(world.pools, observed, nodes)
    assert all(isinstance(a, Unplaceable) for a in again)
    assert [(a.pool, a.missing, a.count) for a in again if isinstance(a, Unplaceable)] == [
        (a.pool, a.missing, a.count) for a in actions if isinstance(a, Unplaceable)
    ]


@settings(max_examples=200, deadline=None)
@given(worlds(), st.randoms(use_true_random=False))
def test_the_actions_do_not_depend_on_the_order_things_were_observed_in(
    world: World, shuffler: random.Random
) -> None:
    observed, nodes = list(world.observed), list(world.nodes)
    shuffler.shuffle(observed)
    shuffler.shuffle(nodes)
    assert reconcile(world.pools, observed, nodes) == reconcile(
        world.pools, world.observed, world.nodes
    )
