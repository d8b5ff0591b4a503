"""Reconcile: pools kept at size on matching nodes, losses replaced, newest surplus drained."""

from __future__ import annotations

import itertools

import pytest
from reconcile_world import MI300X, MI355X, apply, node, pool, replica

from orchestrator.config import default_config, validate_config
from orchestrator.controlplane.reconcile import (
    DrainReplica,
    ForgetReplica,
    Missing,
    ObservedReplica,
    StartReplica,
    StopReplica,
    Unplaceable,
    reconcile,
)

US_MI355X = pool("us-mi355x", "us", "MI355X", 4)


def test_scaling_up_places_replicas_only_on_nodes_of_the_pools_site_and_generation() -> None:
    nodes = [
        node("us-a", "us", MI355X, gpus_free=2),
        node("us-b", "us", MI355X, gpus_free=2),
        node("us-mi300x", "us", MI300X, gpus_free=8),  # right site, wrong generation
        node("kr-mi355x", "kr", MI355X, gpus_free=8),  # right generation, wrong site
        node("us-dead", "us", MI355X, gpus_free=8, alive=False),
        node("us-cpu", "us", None, gpus_free=0),  # a node without GPUs
    ]
    assert reconcile([US_MI355X], [], nodes) == [
        StartReplica("us-mi355x", "us-a"),
        StartReplica("us-mi355x", "us-b"),
        StartReplica("us-mi355x", "us-a"),
        StartReplica("us-mi355x", "us-b"),
    ]


def test_new_replicas_go_to_the_node_with_fewest_of_the_pool_then_most_free_gpus() -> None:
    nodes = [
        node("us-a", "us", MI355X, gpus_free=6),
        node("us-b", "us", MI355X, gpus_free=3),
        node("us-c", "us", MI355X, gpus_free=5),
    ]
    observed = [replica("r0", "us-mi355x", "us-a"), replica("r1", "us-mi355x", "us-c")]
    assert reconcile([US_MI355X], observed, nodes) == [
        StartReplica("us-mi355x", "us-b"),  # the only node without one
        StartReplica("us-mi355x", "us-a"),  # all have one now; us-a has the most free GPUs
    ]


def test_any_spelling_of_the_accelerator_type_matches_the_pools_generation() -> None:
    nodes = [node("us-a", "us", "AMD Instinct MI355X", gpus_free=4), node("us-b", "us", "75a3")]
    actions = reconcile([pool("us-mi355x", "us", "mi355", 2)], [], nodes)
    assert actions == [StartReplica("us-mi355x", "us-b"), StartReplica("us-mi355x", "us-a")]


def test_a_replica_needing_several_gpus_goes_only_where_that_many_are_free() -> None:
    wide = pool("us-wide", "us", "MI355X", 2, gpus=4)
    nodes = [node("us-a", "us", MI355X, gpus_free=3), node("us-b", "us", MI355X, gpus_free=8)]
    assert reconcile([wide], [], nodes) == [
        StartReplica("us-wide", "us-b"),
        StartReplica("us-wide", "us-b"),
    ]


def test_losing_a_node_forgets_its_replicas_and_replaces_them_on_another_matching_node() -> None:
    nodes = [
        node("us-a", "us", MI355X, alive=False),
        node("us-b", "us", MI355X),
        node("us-c", "us", MI355X),
        node("kr-a", "kr", MI355X),
    ]
    observed = [
        replica("r0", "us-mi355x", "us-a"),
        replica("r1", "us-mi355x", "us-a", "starting"),
        replica("r2", "us-mi355x", "us-b"),
        replica("r3", "us-mi355x", "us-c"),
    ]
    assert reconcile([US_MI355X], observed, nodes) == [
        ForgetReplica("r0"),
        ForgetReplica("r1"),
        StartReplica("us-mi355x", "us-b"),
        StartReplica("us-mi355x", "us-c"),
    ]


def test_a_replica_on_a_node_that_left_the_cluster_is_forgotten_like_one_on_a_dead_node() -> None:
    observed = [replica("r0", "us-mi355x", "vanished", "draining")]
    actions = reconcile([pool("us-mi355x", "us", "MI355X", 0)], observed, [])
    assert actions == [ForgetReplica("r0")]


def test_losing_the_only_matching_node_reports_the_pool_unplaceable() -> None:
    nodes = [node("us-a", "us", MI355X, alive=False), node("us-b", "us", MI300X)]
    observed = [replica("r0", "us-mi355x", "us-a")]
    actions = reconcile([pool("us-mi355x", "us", "MI355X", 1)], observed, nodes)
    assert actions[0] == ForgetReplica("r0")
    assert isinstance(actions[1], Unplaceable)
    assert (actions[1].missing, actions[1].count) == (Missing.GENERATION, 1)
    assert len(actions) == 2


def test_scaling_down_drains_the_newest_ready_replicas_first_and_no_more_than_needed() -> None:
    observed = [
        replica("r0", "us-mi355x", "us-a", since_s=10.0),
        replica("r1", "us-mi355x", "us-a", since_s=40.0),
        replica("r2", "us-mi355x", "us-b", since_s=20.0),
        replica("r3", "us-mi355x", "us-b", since_s=30.0),
    ]
    nodes = [node("us-a", "us", MI355X), node("us-b", "us", MI355X)]
    actions = reconcile([pool("us-mi355x", "us", "MI355X", 2)], observed, nodes)
    assert actions == [DrainReplica("r1"), DrainReplica("r3")]


def test_scaling_down_drains_replicas_still_starting_before_ready_ones() -> None:
    observed = [
        replica("r0", "us-mi355x", "us-a", since_s=50.0),
        replica("r1", "us-mi355x", "us-a", "starting", since_s=5.0),
        replica("r2", "us-mi355x", "us-a", since_s=20.0),
    ]
    actions = reconcile(
        [pool("us-mi355x", "us", "MI355X", 1)], observed, [node("us-a", "us", MI355X)]
    )
    assert actions == [DrainReplica("r1"), DrainReplica("r0")]


def test_a_pool_scaled_to_zero_drains_every_serving_replica_and_stops_the_gone_ones() -> None:
    observed = [
        replica("r0", "us-mi355x", "us-a"),
        replica("r1", "us-mi355x", "us-a", "starting"),
        replica("r2", "us-mi355x", "us-a", "draining"),
        replica("r3", "us-mi355x", "us-a", "gone"),
    ]
    actions = reconcile(
        [pool("us-mi355x", "us", "MI355X", 0)], observed, [node("us-a", "us", MI355X)]
    )
    assert actions == [StopReplica("r3"), DrainReplica("r1"), DrainReplica("r0")]


def test_draining_replicas_do_not_count_towards_the_pools_size() -> None:
    observed = [
        replica("r0", "us-mi355x", "us-a"),
        replica("r1", "us-mi355x", "us-a", "draining"),
    ]
    actions = reconcile(
        [pool("us-mi355x", "us", "MI355X", 2)], observed, [node("us-a", "us", MI355X)]
    )
    assert actions == [StartReplica("us-mi355x", "us-a")]


def test_a_pool_at_its_size_gets_no_actions() -> None:
    observed = [replica("r0", "us-mi355x", "us-a"), replica("r1", "us-mi355x", "us-b", "starting")]
    nodes = [node("us-a", "us", MI355X), node("us-b", "us", MI355X)]
    assert reconcile([pool("us-mi355x", "us", "MI355X", 2)], observed, nodes) == []


@pytest.mark.parametrize(
    ("nodes", "missing", "words"),
    [
        pytest.param(
            [node("kr-a", "kr", MI355X)],
            Missing.SITE,
            "no live node is in site 'us' (live nodes are in: kr)",
            id="no-node-in-the-site",
        ),
        pytest.param(
            [node("us-a", "us", MI300X), node("us-b", "us", "NVIDIA-H100")],
            Missing.GENERATION,
            "no live node in site 'us' has MI355X GPUs (there: AMD-Instinct-MI300X-OAM,"
            " NVIDIA-H100)",
            id="no-node-of-the-generation",
        ),
        pytest.param(
            [node("us-a", "us", MI355X, gpus_free=0)],
            Missing.GPUS,
            "each replica needs 1 free MI355X GPU in site 'us'; free now: us-a: 0",
            id="no-free-gpus",
        ),
    ],
)
def test_a_replica_that_fits_nowhere_is_reported_naming_what_is_missing(
    nodes: list, missing: Missing, words: str
) -> None:
    (action,) = reconcile([pool("us-mi355x", "us", "MI355X", 2)], [], nodes)
    assert isinstance(action, Unplaceable)
    assert (action.pool, action.missing, action.count) == ("us-mi355x", missing, 2)
    assert action.reason == f"2 replicas of pool 'us-mi355x' fit on no node: {words}"


def test_a_pool_that_partly_fits_starts_what_fits_and_reports_the_rest() -> None:
    nodes = [node("us-a", "us", MI355X, gpus_free=2)]
    actions = reconcile([US_MI355X], [], nodes)
    assert actions[:2] == [StartReplica("us-mi355x", "us-a"), StartReplica("us-mi355x", "us-a")]
    assert isinstance(actions[2], Unplaceable)
    assert (actions[2].missing, actions[2].count) == (Missing.GPUS, 2)


def test_pools_compete_for_gpus_in_the_order_given() -> None:
    first, second = pool("us-one", "us", "MI355X", 2), pool("us-two", "us", "MI355X", 2)
    actions = reconcile([first, second], [], [node("us-a", "us", MI355X, gpus_free=3)])
    assert actions[:3] == [
        StartReplica("us-one", "us-a"),
        StartReplica("us-one", "us-a"),
        StartReplica("us-two", "us-a"),
    ]
    assert isinstance(actions[3], Unplaceable)
    assert actions[3].pool == "us-two"


def test_external_pools_produce_no_actions() -> None:
    config = validate_config(
        {
            "apiVersion": "orchestrator/v1alpha1",
            "kind": "Orchestrator",
            "sites": {"us": {}},
            "pools": [
                {
                    "name": "us-ext",
                    "site": "us",
                    "generation": "MI300X",
                    "engine": "external",
                    "endpoints": ["http://10.0.0.1:8000"],
                }
            ],
        }
    )
    observed = [replica("x0", "us-ext", "", "ready"), replica("x1", "us-ext", "gone-node", "gone")]
    assert reconcile(config, observed, [node("us-a", "us", MI300X)]) == []


def test_replicas_of_a_pool_no_longer_desired_drain_away() -> None:
    observed = [
        replica("old-0", "retired", "us-a"),
        replica("old-1", "retired", "us-a", "gone"),
        replica("r0", "us-mi355x", "us-a"),
    ]
    actions = reconcile(
        [pool("us-mi355x", "us", "MI355X", 1)], observed, [node("us-a", "us", MI355X)]
    )
    assert actions == [StopReplica("old-1"), DrainReplica("old-0")]


def test_the_default_config_comes_up_on_one_node_per_site_and_generation() -> None:
    nodes = [
        node("head", None, None, gpus_free=0),
        node("kr-mi300x-node", "kr", MI300X, gpus_free=2),
        node("us-mi355x-node", "us", MI355X, gpus_free=2),
    ]
    assert reconcile(default_config(), [], nodes) == [
        StartReplica("kr-mi300x", "kr-mi300x-node"),
        StartReplica("kr-mi300x", "kr-mi300x-node"),
        StartReplica("us-mi355x", "us-mi355x-node"),
        StartReplica("us-mi355x", "us-mi355x-node"),
    ]


def test_carrying_the_actions_out_and_reconciling_again_gives_nothing_to_do() -> None:
    pools = [pool("us-mi355x", "us", "MI355X", 3), pool("kr-mi300x", "kr", "MI300X", 1)]
    nodes = [
        node("us-a", "us", MI355X, alive=False),
        node("us-b", "us", MI355X, gpus_free=2),
        node("us-c", "us", MI355X, gpus_free=2),
        node("kr-a", "kr", MI300X, gpus_free=4),
    ]
    observed = [
        replica("r0", "us-mi355x", "us-a"),
        replica("r1", "us-mi355x", "us-b", "gone"),
        replica("k0", "kr-mi300x", "kr-a", since_s=1.0),
        replica("k1", "kr-mi300x", "kr-a", since_s=2.0),
    ]
    actions = reconcile(pools, observed, nodes)
    assert actions == [
        ForgetReplica("r0"),
        StopReplica("r1"),
        StartReplica("us-mi355x", "us-b"),
        StartReplica("us-mi355x", "us-c"),
        StartReplica("us-mi355x", "us-b"),
        DrainReplica("k1"),
    ]
    assert reconcile(pools, *apply(actions, pools, observed, nodes)) == []


def test_the_order_of_the_observations_does_not_change_the_actions() -> None:
    pools = [pool("us-mi355x", "us", "MI355X", 2), pool("kr-mi300x", "kr", "MI300X", 0)]
    nodes = [
        node("us-a", "us", MI355X, gpus_free=1),
        node("us-b", "us", MI355X, gpus_free=1),
        node("us-c", "us", MI355X, alive=False),
        node("kr-a", "kr", MI300X),
    ]
    observed = [
        replica("r0", "us-mi355x", "us-c"),
        replica("k0", "kr-mi300x", "kr-a", since_s=3.0),
        replica("k1", "kr-mi300x", "kr-a", since_s=3.0),
    ]
    expected = reconcile(pools, observed, nodes)
    for seen, listed in itertools.product(
        itertools.permutations(observed), itertools.permutations(nodes)
    ):
        assert reconcile(pools, seen, listed) == expected


def test_contradictory_inputs_are_refused() -> None:
    twice = [replica("r0", "us-mi355x", "us-a"), replica("r0", "us-mi355x", "us-b")]
    with pytest.raises(ValueError, match="replica id 'r0' appears twice"):
        reconcile([US_MI355X], twice, [])
    with pytest.raises(ValueError, match="pool name 'us-mi355x' appears twice"):
        reconcile([US_MI355X, US_MI355X], [], [])


def test_an_observed_state_is_one_of_the_four_known_ones() -> None:
    assert ObservedReplica("r0", "p", "n", "ready").state == "ready"  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown replica state 'running'; states: starting,"):
        ObservedReplica("r0", "p", "n", "running")  # type: ignore[arg-type]
