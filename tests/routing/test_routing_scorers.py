"""Scorers: each rates candidates in [0, 1] by its stated formula."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from routing_fleet import (
    TARGET_TPOT_S,
    TARGET_TTFT_S,
    candidate,
    capacity,
    mixed_fleet,
    replica,
    request,
    table,
    view,
)

from orchestrator.core.generations import Generation
from orchestrator.core.records import NodeHealth, ReplicaLoad
from orchestrator.routing.plugin import Candidate, Nominator, Scorer, UtilisationScorer
from orchestrator.routing.plugins.scorers.capacity_headroom import CapacityHeadroomScorer
from orchestrator.routing.plugins.scorers.latency_slo import LatencySloScorer
from orchestrator.routing.plugins.scorers.least_requests import LeastRequestsScorer
from orchestrator.routing.plugins.scorers.prefix_affinity import (
    PrefixAffinityScorer,
    prefix_point,
    ring_distance,
    ring_points,
)
from orchestrator.routing.plugins.scorers.site_locality import SiteLocalityScorer
from orchestrator.routing.signals import utilisations

MI300X, MI355X = Generation.MI300X, Generation.MI355X


def concurrency(generation: Generation) -> float:
    return capacity(generation) * TARGET_TPOT_S


# -- capacity-headroom ------------------------------------------------------------------------


def test_capacity_headroom_prefers_the_least_utilised_replica_not_the_fewest_requests() -> None:
    slow = candidate(replica("slow", MI300X), in_flight=10)
    fast = candidate(replica("fast", MI355X), in_flight=30)  # 3× the requests, 4.75× the capacity
    slow_score, fast_score = CapacityHeadroomScorer().score(request(), view(), [slow, fast])
    assert fast_score > slow_score


@pytest.mark.parametrize(
    ("in_flight", "others", "health", "expected_rho"),
    [
        (0, 0, NodeHealth.HEALTHY, 1 / 269),  # the request being placed counts
        (99, 0, NodeHealth.HEALTHY, 100 / 269),
        (49, 50, NodeHealth.HEALTHY, 100 / 269),  # other routers' requests count too
        (99, 0, NodeHealth.DEGRADED, 100 / (269 * 0.5)),  # a degraded node has half the room
    ],
)
def test_capacity_headroom_is_one_over_one_plus_utilisation(
    in_flight: int, others: int, health: NodeHealth, expected_rho: float
) -> None:
    load = ReplicaLoad(running=in_flight + others, waiting=0, kv_cache_usage=0.1)
    subject = candidate(replica("a", MI300X, node_health=health), in_flight=in_flight, load=load)
    rho = expected_rho * 269 / concurrency(MI300X)  # 269 sequences ≈ the MI300X prior × 80 ms
    [score] = CapacityHeadroomScorer().score(request(), view(), [subject])
    assert score == pytest.approx(1 / (1 + rho))


def test_capacity_headroom_scores_replicas_loaded_in_proportion_to_capacity_equally() -> None:
    slow = candidate(replica("slow", MI300X), in_flight=round(concurrency(MI300X) / 2) - 1)
    fast = candidate(replica("fast", MI355X), in_flight=round(concurrency(MI355X) / 2) - 1)
    slow_score, fast_score = CapacityHeadroomScorer().score(request(), view(), [slow, fast])
    assert slow_score == pytest.approx(fast_score, rel=0.01)


def test_capacity_headroom_counts_a_degraded_node_at_the_configured_fraction() -> None:
    scorer = CapacityHeadroomScorer.from_params("c", {"degradedCapacityFactor": 0.25})
    healthy = candidate(replica("h", MI355X), in_flight=99)
    degraded = candidate(replica("d", MI355X, node_health=NodeHealth.DEGRADED), in_flight=24)
    h, d = scorer.score(request(), view(), [healthy, degraded])
    assert h == pytest.approx(d)


# -- least-requests ---------------------------------------------------------------------------


@pytest.mark.parametrize(("in_flight", "expected"), [(0, 1.0), (1, 0.5), (3, 0.25), (99, 0.01)])
def test_least_requests_is_one_over_one_plus_requests_held_whatever_the_capacity(
    in_flight: int, expected: float
) -> None:
    for generation in (MI300X, MI355X):
        subject = candidate(replica("a", generation), in_flight=in_flight)
        assert LeastRequestsScorer().score(request(), view(), [subject]) == [
            pytest.approx(expected)
        ]


# -- latency-slo ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ttft_s", "tpot_s", "in_flight_share", "expected"),
    [
        (None, None, 0.0, 1.0),  # unmeasured and idle: within both targets
        (None, None, 0.74, 1.0),  # TTFT T/4 ÷ (1 − ρ) still within target up to ρ = 0.75
        (2 * TARGET_TTFT_S, None, 0.0, 0.5),  # measured TTFT twice the target
        (None, TARGET_TPOT_S, 0.0, 1.0),  # TPOT at target, idle (ρ ≈ 0)
        (0.1, TARGET_TPOT_S, 1.0, 0.5),  # at ρ = 1 the predicted TPOT doubles
        (2 * TARGET_TTFT_S, 2 * TARGET_TPOT_S, 0.0, 0.25),  # both misses multiply
    ],
)
def test_latency_slo_scores_the_fraction_of_each_target_the_prediction_meets(
    ttft_s: float | None, tpot_s: float | None, in_flight_share: float, expected: float
) -> None:
    in_flight = max(0, round(concurrency(MI355X) * in_flight_share) - 1)
    subject = candidate(replica("a", MI355X), in_flight=in_flight, ttft_s=ttft_s, tpot_s=tpot_s)
    [score] = LatencySloScorer().score(request(), view(), [subject])
    assert score == pytest.approx(expected, rel=0.01)


def test_latency_slo_prefers_the_replica_predicted_to_answer_sooner() -> None:
    quick = candidate(replica("quick", MI355X), ttft_s=TARGET_TTFT_S)
    slow = candidate(replica("slow", MI300X), ttft_s=TARGET_TTFT_S * 3)
    quick_score, slow_score = LatencySloScorer().score(request(), view(), [quick, slow])
    assert quick_score > slow_score


# -- prefix-affinity --------------------------------------------------------------------------


def preferred(scorer: PrefixAffinityScorer, candidates: list[Candidate], prefix: int) -> str:
    fleet_view = view(table(c.replica for c in candidates))
    scores = scorer.score(request(prefix_hash=prefix), fleet_view, candidates)
    assert sorted(scores) == [0.0] * (len(candidates) - 1) + [1.0]
    return candidates[scores.index(1.0)].replica.replica_id


def evenly_loaded(count: int, in_flight: int = 10) -> list[Candidate]:
    return [candidate(replica(f"r{i}", MI355X), in_flight=in_flight) for i in range(count)]


def test_prefix_affinity_is_neutral_when_the_request_has_no_prefix() -> None:
    candidates = evenly_loaded(4)
    scores = PrefixAffinityScorer().score(request(prefix_hash=None), view(), candidates)
    assert scores == [0.5] * 4


def test_prefix_affinity_sends_a_prefix_to_the_same_replica_whatever_the_candidate_order() -> None:
    candidates = evenly_loaded(8)
    scorer = PrefixAffinityScorer()
    home = preferred(scorer, candidates, prefix=1234)
    shuffled = list(candidates)
    random.Random(3).shuffle(shuffled)
    assert preferred(scorer, shuffled, prefix=1234) == home
    assert preferred(PrefixAffinityScorer(), candidates, prefix=1234) == home  # another router


def test_prefix_affinity_spreads_different_prefixes_over_the_replicas() -> None:
    candidates = evenly_loaded(8)
    scorer = PrefixAffinityScorer()
    homes = {preferred(scorer, candidates, prefix=p) for p in range(200)}
    assert len(homes) == 8


def test_prefix_affinity_homes_prefixes_in_proportion_to_capacity() -> None:
    # Equally utilised, so the load bound never moves a prefix and only the ring decides.
    candidates = [
        candidate(r, in_flight=round(concurrency(r.generation) * 0.3) - 1) for r in mixed_fleet(4)
    ]
    scorer = PrefixAffinityScorer()
    fleet_view = view(table(c.replica for c in candidates))
    homes = {c.replica.replica_id: 0 for c in candidates}
    for prefix in range(4000):
        scores = scorer.score(request(prefix_hash=prefix), fleet_view, candidates)
        homes[candidates[scores.index(1.0)].replica.replica_id] += 1
    by_generation = {MI300X: 0, MI355X: 0}
    for c in candidates:
        by_generation[c.replica.generation] += homes[c.replica.replica_id]
    ratio = by_generation[MI355X] / by_generation[MI300X]
    assert ratio == pytest.approx(capacity(MI355X) / capacity(MI300X), rel=0.25)


def test_prefix_affinity_moves_a_prefix_to_the_next_replica_when_home_exceeds_the_bound() -> None:
    candidates = evenly_loaded(8, in_flight=20)
    scorer = PrefixAffinityScorer()
    home = preferred(scorer, candidates, prefix=77)
    by_id = {c.replica.replica_id: c for c in candidates}
    # Within the bound: (1 + 0.25) × mean. 24 in flight among seven at 20 stays under it.
    by_id[home].stats.in_flight = 24
    assert preferred(scorer, candidates, prefix=77) == home
    # Well over the bound: the next replica on the ring takes the prefix, and keeps it.
    by_id[home].stats.in_flight = 40
    spill = preferred(scorer, candidates, prefix=77)
    assert spill != home
    assert preferred(scorer, candidates, prefix=77) == spill


def test_prefix_affinity_order_on_a_subset_is_the_full_order_restricted_to_it() -> None:
    candidates = evenly_loaded(32)
    scorer = PrefixAffinityScorer.from_params("p", {"loadFactor": 100.0})
    fleet_view = view(table(c.replica for c in candidates))
    rng = random.Random(5)
    for prefix in range(50):
        ctx = request(prefix_hash=prefix)
        eligible = tuple(candidates)
        [home] = scorer.nominate(ctx, fleet_view, eligible)[:1]
        subset = [*rng.sample([c for c in candidates if c is not home], 7), home]
        scores = scorer.score(ctx, fleet_view, subset)
        assert subset[scores.index(1.0)] is home


def test_prefix_affinity_nominates_the_first_distinct_replicas_on_the_ring() -> None:
    candidates = tuple(evenly_loaded(64))
    scorer = PrefixAffinityScorer.from_params("p", {"nominees": 3})
    assert isinstance(scorer, Nominator)
    nominees = scorer.nominate(
        request(prefix_hash=9), view(table(c.replica for c in candidates)), candidates
    )
    assert len({id(c) for c in nominees}) == 3
    assert scorer.nominate(request(prefix_hash=None), view(), candidates) == []


def nearest_on_the_ring(
    scorer: PrefixAffinityScorer, survivors: Sequence[Candidate], prefix: int, largest: float
) -> list[str]:
    point = prefix_point(prefix)
    ranked = sorted(
        survivors,
        key=lambda c: ring_distance(
            point, ring_points(c.replica.replica_id, scorer._points(c.replica, largest))
        ),
    )
    return [c.replica.replica_id for c in ranked[: scorer.nominees]]


def test_prefix_affinity_nominees_are_the_survivors_nearest_on_the_ring_whatever_survives() -> None:
    """Nominees come from the table's ring, skipping replicas filtered out (or from a ring of
    the survivors when few survive, or when they are not the table's): either way, the
    survivors nearest clockwise of the point. Two models share the table, as in a router
    serving both, and the survivor sets alternate, as two models' requests do."""
    ours = [
        candidate(replica(f"r{i}", MI355X if i % 2 else MI300X), in_flight=10) for i in range(48)
    ]
    theirs = [
        candidate(replica(f"o{i}", MI355X, model="other-model"), in_flight=10) for i in range(48)
    ]
    scorer = PrefixAffinityScorer.from_params("p", {"nominees": 3})
    fleet_view = view(table(c.replica for c in [*ours, *theirs]))
    largest = max(c.replica.capacity_prior_tokens_per_s for c in ours)
    rng = random.Random(11)
    # 96 in the table: 24 or more survivors walk the table's ring, fewer their own
    groups = [tuple(rng.sample(ours, size)) for size in (48, 40, 25, 24, 23, 12, 4, 2, 1)]
    for _ in range(2):
        for survivors in [*groups, tuple(theirs[:30])]:
            for prefix in rng.sample(range(1 << 40), 10):
                nominees = scorer.nominate(request(prefix_hash=prefix), fleet_view, survivors)
                assert [c.replica.replica_id for c in nominees] == nearest_on_the_ring(
                    scorer, survivors, prefix, largest
                ), (len(survivors), prefix)
    # survivors the view's table does not hold are still nominated (a ring of their own)
    elsewhere = view(table(c.replica for c in ours[:30]))
    survivors = tuple(ours[20:44])
    for prefix in rng.sample(range(1 << 40), 10):
        nominees = scorer.nominate(request(prefix_hash=prefix), elsewhere, survivors)
        assert [c.replica.replica_id for c in nominees] == nearest_on_the_ring(
            scorer, survivors, prefix, max(c.replica.capacity_prior_tokens_per_s for c in ours[:30])
        )


# -- site-locality ----------------------------------------------------------------------------


def two_sites(local_ttft_s: float, remote_ttft_s: float) -> list[Candidate]:
    # Capacity is large and nothing is in flight, so predicted TTFT ≈ the measured TTFT.
    return [
        candidate(replica("kr-0", MI355X, site="kr"), ttft_s=local_ttft_s),
        candidate(replica("us-0", MI355X, site="us"), ttft_s=remote_ttft_s),
    ]


def site_scores(
    scorer: SiteLocalityScorer, local_ttft_s: float, remote_ttft_s: float
) -> list[float]:
    candidates = two_sites(local_ttft_s, remote_ttft_s)
    fleet_view = view(table(c.replica for c in candidates))
    return scorer.score(request(client_site="kr"), fleet_view, candidates)


def test_site_locality_is_neutral_when_the_client_site_is_unknown() -> None:
    candidates = two_sites(1.0, 0.1)
    assert SiteLocalityScorer().score(request(client_site=None), view(), candidates) == [1.0, 1.0]


@pytest.mark.parametrize(("remote_score", "expected"), [(0.0, [1.0, 0.0]), (0.3, [1.0, 0.3])])
def test_site_locality_prefers_the_local_site_while_remote_is_not_faster_by_the_rtt(
    remote_score: float, expected: list[float]
) -> None:
    scorer = SiteLocalityScorer.from_params("s", {"remoteScore": remote_score})
    # Remote is 0.12 s faster, but the round trip is 0.15 s.
    assert site_scores(scorer, local_ttft_s=0.32, remote_ttft_s=0.20) == expected


def test_site_locality_spills_with_hysteresis_entering_and_leaving_at_different_thresholds() -> (
    None
):
    scorer = SiteLocalityScorer()  # margin 0.05 s; RTT kr↔us 0.15 s
    steps = [
        # (local TTFT, remote TTFT, remote score): advantage = local − remote − RTT
        (0.39, 0.20, 0.0),  # advantage +0.04 < margin: stay local
        (0.41, 0.20, 1.0),  # +0.06 > margin: spill
        (0.36, 0.20, 1.0),  # +0.01: inside the band, keep spilling
        (0.31, 0.20, 1.0),  # −0.04: still inside the band
        (0.29, 0.20, 0.0),  # −0.06 < −margin: back to local
        (0.39, 0.20, 0.0),  # +0.04: inside the band, stay local
    ]
    for local, remote, remote_score in steps:
        assert site_scores(scorer, local, remote) == [1.0, remote_score], (local, remote)
        assert scorer.spilling("kr", "us") is (remote_score == 1.0)


def test_site_locality_spills_when_the_client_site_has_no_replica() -> None:
    scorer = SiteLocalityScorer()
    candidates = two_sites(0.2, 0.2)
    fleet_view = view(table(c.replica for c in candidates))
    assert scorer.score(request(client_site="eu"), fleet_view, candidates) == [1.0, 1.0]


def test_site_locality_nominates_local_replicas_only() -> None:
    candidates = tuple(candidate(r) for r in mixed_fleet(64))
    scorer = SiteLocalityScorer.from_params("s", {"nominees": 3})
    nominees = scorer.nominate(request(client_site="us"), view(), candidates)
    assert len(nominees) == 3
    assert {c.replica.site for c in nominees} == {"us"}
    assert scorer.nominate(request(client_site=None), view(), candidates) == []


@pytest.mark.parametrize(
    "scorer",
    [
        CapacityHeadroomScorer(),
        LeastRequestsScorer(),
        LatencySloScorer(),
        PrefixAffinityScorer(),
        SiteLocalityScorer(),
    ],
    ids=lambda s: s.TYPE,
)
def test_every_scorer_returns_one_score_in_the_unit_interval_per_candidate(scorer: Scorer) -> None:
    rng = random.Random(11)
    candidates = [
        candidate(r, in_flight=rng.randrange(0, 3000), ttft_s=rng.choice([None, 0.0, 5.0]))
        for r in mixed_fleet(8)
    ]
    fleet_view = view(table(c.replica for c in candidates))
    for ctx in (request(), request(prefix_hash=5, client_site="kr")):
        scores = scorer.score(ctx, fleet_view, candidates)
        assert len(scores) == len(candidates)
        assert all(0.0 <= s <= 1.0 for s in scores)


# -- shared utilisations ----------------------------------------------------------------------


def test_scorers_rating_by_utilisation_score_alike_from_a_shared_list() -> None:
    fleet = mixed_fleet(4)
    rng = random.Random(5)
    candidates = [
        candidate(r, in_flight=rng.randrange(400), ttft_s=rng.choice([None, 0.4, 5.0]),
                  tpot_s=rng.choice([None, 0.02, 0.2]))
        for r in fleet
    ]  # fmt: skip
    fleet_view = view(table(fleet))
    scorers: list[UtilisationScorer] = [
        CapacityHeadroomScorer(),
        LatencySloScorer(),
        PrefixAffinityScorer(),
        SiteLocalityScorer(),
    ]
    for ctx in (request(), request(prefix_hash=77, client_site="kr")):
        for scorer in scorers:
            assert isinstance(scorer, UtilisationScorer)
            rhos = utilisations(candidates, TARGET_TPOT_S, scorer.degraded_capacity_factor)
            shared = scorer.score_utilised(ctx, fleet_view, candidates, rhos)
            assert shared == scorer.score(ctx, fleet_view, candidates)
    assert not isinstance(LeastRequestsScorer(), UtilisationScorer)
