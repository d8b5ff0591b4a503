"""Pickers: a primary and ordered fallbacks from scored candidates."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from routing_fleet import candidate, replica, request, view

from orchestrator.core.generations import Generation
from orchestrator.routing.plugin import Candidate, WholeSetPicker
from orchestrator.routing.plugins.pickers.max_score import MaxScorePicker
from orchestrator.routing.plugins.pickers.power_of_two import PowerOfTwoPicker
from orchestrator.routing.plugins.pickers.round_robin import RoundRobinPicker
from orchestrator.routing.plugins.pickers.weighted_random import WeightedRandomPicker


def ids(candidates: list[Candidate]) -> list[str]:
    return [c.replica.replica_id for c in candidates]


def named(*replica_ids: str, in_flight: tuple[int, ...] = ()) -> tuple[Candidate, ...]:
    loads = in_flight or (0,) * len(replica_ids)
    return tuple(
        candidate(replica(r), in_flight=n) for r, n in zip(replica_ids, loads, strict=True)
    )


# -- max-score --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([0.2, 0.9, 0.5], ["b", "c", "a"]),
        ([0.9, 0.1, 0.5], ["a", "c", "b"]),
        ([0.1, 0.2, 0.3], ["c", "b", "a"]),
    ],
)
def test_max_score_puts_the_best_first_and_the_rest_by_score(
    scores: list[float], expected: list[str]
) -> None:
    candidates = named("a", "b", "c")
    assert ids(MaxScorePicker().pick(request(), view(), candidates, scores)) == expected


def test_max_score_breaks_ties_at_random_so_equal_replicas_share_the_load() -> None:
    picker = MaxScorePicker()
    candidates = named("a", "b", "c")
    scores = [0.7, 0.7 + 1e-12, 0.3]  # within 1e-9: a tie
    firsts = Counter(
        ids(picker.pick(request(), view(), candidates, scores))[0] for _ in range(2000)
    )
    assert set(firsts) == {"a", "b"}
    assert firsts["a"] == pytest.approx(1000, rel=0.15)


def test_max_score_returns_at_most_limit_candidates() -> None:
    candidates = named("a", "b", "c", "d")
    picked = MaxScorePicker().pick(request(), view(), candidates, [0.1, 0.2, 0.3, 0.4], limit=2)
    assert ids(picked) == ["d", "c"]


# -- round-robin ------------------------------------------------------------------------------


def test_round_robin_cycles_in_replica_id_order_whatever_the_scores_or_input_order() -> None:
    picker = RoundRobinPicker()
    candidates = named("c", "a", "b")
    firsts = [ids(picker.pick(request(), view(), candidates, [1.0, 0.0, 0.5]))[0] for _ in range(6)]
    assert firsts == ["a", "b", "c", "a", "b", "c"]


def test_round_robin_fallbacks_are_the_replicas_that_follow_in_the_cycle() -> None:
    picker = RoundRobinPicker()
    candidates = named("a", "b", "c", "d")
    picker.pick(request(), view(), candidates, [0.0] * 4)
    assert ids(picker.pick(request(), view(), candidates, [0.0] * 4, limit=3)) == ["b", "c", "d"]


def test_round_robin_continues_after_the_last_replica_when_the_set_changes() -> None:
    picker = RoundRobinPicker()
    assert ids(picker.pick(request(), view(), named("a", "b", "c"), [0.0] * 3))[0] == "a"
    assert ids(picker.pick(request(), view(), named("a", "b", "c"), [0.0] * 3))[0] == "b"
    # "b" left and "bb" joined: the cycle goes on from where it was.
    assert ids(picker.pick(request(), view(), named("a", "bb", "c"), [0.0] * 3))[0] == "bb"


def test_round_robin_routers_reseeded_apart_start_their_cycles_at_different_replicas() -> None:
    candidates = named("a", "b", "c", "d")
    firsts = []
    for salt in (1, 2, 7):
        picker = RoundRobinPicker()
        picker.reseed(salt)
        firsts.append([ids(picker.pick(request(), view(), candidates, [0.0] * 4))[0] for _ in "xy"])
    assert firsts == [["b", "c"], ["c", "d"], ["d", "a"]]


def test_round_robin_and_weighted_random_see_the_whole_set_unsampled() -> None:
    assert isinstance(RoundRobinPicker(), WholeSetPicker)
    assert isinstance(WeightedRandomPicker(), WholeSetPicker)
    assert not isinstance(MaxScorePicker(), WholeSetPicker)


# -- power-of-two -----------------------------------------------------------------------------


def test_power_of_two_with_two_candidates_always_picks_the_one_holding_fewer_requests() -> None:
    picker = PowerOfTwoPicker()
    candidates = named("busy", "idle", in_flight=(9, 2))
    for _ in range(50):
        assert ids(picker.pick(request(), view(), candidates, [0.0, 0.0])) == ["idle", "busy"]


def test_power_of_two_never_picks_the_busiest_and_spreads_over_the_rest() -> None:
    picker = PowerOfTwoPicker.from_params("p2", {"seed": 4})
    candidates = named("a", "b", "c", "d", in_flight=(0, 1, 2, 3))
    firsts = Counter(
        ids(picker.pick(request(), view(), candidates, [0.0] * 4))[0] for _ in range(3000)
    )
    assert "d" not in firsts
    assert firsts["a"] > firsts["b"] > firsts["c"] > 0  # P = 1/2, 1/3, 1/6


def test_power_of_two_fallbacks_are_the_other_then_the_rest_by_fewer_requests() -> None:
    picker = PowerOfTwoPicker()
    candidates = named("a", "b", "c", "d", "e", in_flight=(5, 4, 3, 2, 1))
    picked = ids(picker.pick(request(), view(), candidates, [0.0] * 5))
    loads = dict(zip("abcde", (5, 4, 3, 2, 1), strict=True))
    assert sorted(picked) == list("abcde")
    assert loads[picked[0]] < loads[picked[1]]
    assert [loads[r] for r in picked[2:]] == sorted(loads[r] for r in picked[2:])


# -- weighted-random --------------------------------------------------------------------------


def test_weighted_random_picks_in_proportion_to_static_weight() -> None:
    picker = WeightedRandomPicker()
    candidates = (
        candidate(replica("light", static_weight=1.0)),
        candidate(replica("heavy", static_weight=3.0)),
    )
    firsts = Counter(
        ids(picker.pick(request(), view(), candidates, [0.0, 0.0]))[0] for _ in range(8000)
    )
    assert firsts["heavy"] / firsts["light"] == pytest.approx(3.0, rel=0.1)


def test_weighted_random_pool_weights_override_replica_weights() -> None:
    picker = WeightedRandomPicker.from_params("w", {"weights": {"kr-mi355x": 5.0}})
    candidates = (
        candidate(replica("mi300x", Generation.MI300X, static_weight=1.0)),
        candidate(replica("mi355x", Generation.MI355X, static_weight=1.0)),
    )
    firsts = Counter(
        ids(picker.pick(request(), view(), candidates, [0.0, 0.0]))[0] for _ in range(6000)
    )
    assert firsts["mi355x"] / firsts["mi300x"] == pytest.approx(5.0, rel=0.12)


def test_weighted_random_fallbacks_are_the_others_heaviest_first() -> None:
    picker = WeightedRandomPicker(rng=random.Random(1))
    candidates = tuple(
        candidate(replica(name, static_weight=w))
        for name, w in (("a", 1.0), ("b", 4.0), ("c", 2.0))
    )
    for _ in range(20):
        picked = ids(picker.pick(request(), view(), candidates, [0.0] * 3))
        rest = [r for r in ["b", "c", "a"] if r != picked[0]]
        assert picked[1:] == rest
