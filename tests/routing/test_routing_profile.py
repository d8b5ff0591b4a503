"""Profiles: filters → scorers → picker, errors with the right code, shares by capacity, and a
decision cost that does not grow with the fleet."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from routing_fleet import (
    capacity,
    mixed_fleet,
    replica,
    request,
    share_ratio,
    simulate,
    table,
    view,
)

from orchestrator.core.errors import ErrorCode
from orchestrator.core.generations import Generation
from orchestrator.core.records import Replica, ReplicaLoad, ReplicaState
from orchestrator.routing.context import RequestContext
from orchestrator.routing.fleet_state import FleetState
from orchestrator.routing.plugin import Candidate, RoutingView
from orchestrator.routing.plugins.filters.kv_headroom import KvHeadroomFilter
from orchestrator.routing.plugins.filters.model_served import ModelServedFilter
from orchestrator.routing.plugins.pickers.max_score import MaxScorePicker
from orchestrator.routing.plugins.pickers.round_robin import RoundRobinPicker
from orchestrator.routing.plugins.scorers.least_requests import LeastRequestsScorer
from orchestrator.routing.profile import (
    FilterStep,
    NoCandidateError,
    Profile,
    ProfileSpec,
    ScorerStep,
)
from orchestrator.routing.profiles import builtin_profiles

CAPACITY_RATIO = capacity(Generation.MI355X) / capacity(Generation.MI300X)  # ≈ 4.75


class SpyScorer:
    """Scores 0.5, and remembers how many candidates it was shown and where requests went."""

    TYPE: ClassVar[str] = "spy"

    def __init__(self) -> None:
        self.name = "spy"
        self.shown: list[int] = []
        self.routed: list[str] = []

    def score(
        self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
    ) -> list[float]:
        self.shown.append(len(candidates))
        return [0.5] * len(candidates)

    def on_routed(self, ctx: RequestContext, replica: Replica) -> None:
        self.routed.append(replica.replica_id)


def capacity_profile() -> Profile:
    return builtin_profiles()["capacity"]


def loaded(replicas: Sequence[Replica], **stats: object) -> list[Candidate]:
    fleet = FleetState()
    fleet.sync(table(replicas))
    candidates = fleet.candidates(table(replicas))
    for c in candidates:
        for key, value in stats.items():
            setattr(c.stats, key, value)
    return candidates


# -- errors -----------------------------------------------------------------------------------


def test_a_model_no_replica_serves_is_not_found() -> None:
    replicas = mixed_fleet(2)
    with pytest.raises(NoCandidateError) as caught:
        capacity_profile().decide(
            request(model="no/such-model"), view(table(replicas)), loaded(replicas)
        )
    assert caught.value.code is ErrorCode.NOT_FOUND
    assert caught.value.param == "model"


def test_a_served_model_whose_replicas_are_all_unhealthy_is_unavailable() -> None:
    replicas = [replica(f"r{i}", state=ReplicaState.UNHEALTHY) for i in range(4)]
    with pytest.raises(NoCandidateError) as caught:
        capacity_profile().decide(request(), view(table(replicas)), loaded(replicas))
    assert caught.value.code is ErrorCode.UNAVAILABLE
    assert "healthy" in caught.value.message


def test_a_soft_filter_that_would_exclude_every_replica_fails_open() -> None:
    replicas = mixed_fleet(2)
    full = ReplicaLoad(running=100, waiting=5, kv_cache_usage=0.99)
    decision = capacity_profile().decide(
        request(), view(table(replicas)), loaded(replicas, load=full)
    )
    assert decision.primary in replicas


def test_a_soft_filter_still_narrows_when_some_replicas_pass_it() -> None:
    replicas = mixed_fleet(2)
    candidates = loaded(replicas)
    for c in candidates[1:]:
        c.stats.load = ReplicaLoad(running=100, waiting=5, kv_cache_usage=0.99)
    for step in range(20):
        decision = capacity_profile().decide(
            request(), view(table(replicas), now_s=step), candidates
        )
        assert decision.primary is replicas[0]
        assert decision.fallbacks == ()


def test_the_same_filter_made_hard_makes_a_full_fleet_unavailable() -> None:
    replicas = mixed_fleet(2)
    profile = Profile(
        ProfileSpec(
            "hard-kv",
            filters=(FilterStep(ModelServedFilter()), FilterStep(KvHeadroomFilter())),
            scorers=(ScorerStep(LeastRequestsScorer(), 1.0),),
            picker=MaxScorePicker(),
        )
    )
    full = ReplicaLoad(running=100, waiting=5, kv_cache_usage=0.99)
    with pytest.raises(NoCandidateError) as caught:
        profile.decide(request(), view(table(replicas)), loaded(replicas, load=full))
    assert caught.value.code is ErrorCode.UNAVAILABLE
    assert "kv-headroom" in caught.value.message


# -- decisions --------------------------------------------------------------------------------


def test_a_decision_has_distinct_fallbacks_up_to_the_profiles_limit() -> None:
    replicas = mixed_fleet(8)
    decision = capacity_profile().decide(request(), view(table(replicas)), loaded(replicas))
    tried = [decision.primary, *decision.fallbacks]
    assert len(decision.fallbacks) == 3
    assert len({r.replica_id for r in tried}) == 4
    assert decision.profile == "capacity"


def test_observers_hear_where_each_request_went() -> None:
    spy = SpyScorer()
    replicas = mixed_fleet(2)
    profile = Profile(ProfileSpec("spy", (), (ScorerStep(spy, 1.0),), MaxScorePicker()))
    decision = profile.decide(request(), view(table(replicas)), loaded(replicas))
    assert spy.routed == [decision.primary.replica_id]


def test_a_profile_with_scores_and_a_picker_that_ignores_them_is_refused() -> None:
    with pytest.raises(ValueError, match="ignores scores"):
        Profile(
            ProfileSpec("rr", (), (ScorerStep(LeastRequestsScorer(), 1.0),), RoundRobinPicker())
        )


def test_a_replica_marked_unhealthy_in_a_new_table_is_avoided_at_once() -> None:
    replicas = mixed_fleet(2)
    fleet = FleetState()
    fleet.sync(table(replicas))
    profile = capacity_profile()
    before = fleet.candidates(table(replicas, version=1))
    profile.decide(request(), view(table(replicas, version=1)), before)
    first = replicas[0]
    sick = replica(
        first.replica_id, first.generation, site=first.site, state=ReplicaState.UNHEALTHY
    )
    newer = table([sick, *replicas[1:]], version=2)
    after = fleet.candidates(newer)
    for step in range(30):
        decision = profile.decide(request(), view(newer, now_s=step * 0.001), after)
        assert decision.primary.replica_id != first.replica_id


def test_a_circuit_that_opens_is_respected_from_the_next_filter_bucket() -> None:
    replicas = mixed_fleet(1)
    candidates = loaded(replicas)
    fleet_table = table(replicas)
    profile = capacity_profile()
    profile.decide(request(), view(fleet_table, now_s=0.0), candidates)
    candidates[1].stats.circuit_open = True
    for step in range(20):
        decision = profile.decide(request(), view(fleet_table, now_s=0.2 + step * 0.01), candidates)
        assert decision.primary is replicas[0]


def test_with_no_more_candidates_than_the_sample_size_every_candidate_is_scored() -> None:
    spy = SpyScorer()
    profile = Profile(
        ProfileSpec("spy", (), (ScorerStep(spy, 1.0),), MaxScorePicker(), sample_size=8)
    )
    replicas = mixed_fleet(4)
    profile.decide(request(), view(table(replicas)), loaded(replicas))
    assert spy.shown == [8]


def test_with_more_candidates_than_the_sample_size_only_a_sample_is_scored() -> None:
    spy = SpyScorer()
    profile = Profile(
        ProfileSpec("spy", (), (ScorerStep(spy, 1.0),), MaxScorePicker(), sample_size=8)
    )
    replicas = mixed_fleet(256)
    candidates = loaded(replicas)
    seen: set[str] = set()
    for step in range(200):
        decision = profile.decide(request(), view(table(replicas), now_s=step * 0.001), candidates)
        seen.add(decision.primary.replica_id)
    assert spy.shown == [8] * 200
    assert len(seen) > 150  # the samples cover the fleet


def test_the_sample_includes_the_replica_prefix_affinity_nominates() -> None:
    replicas = mixed_fleet(256)
    candidates = loaded(replicas, in_flight=100)
    profile = capacity_profile()
    fleet_table = table(replicas)
    homes = {
        profile.decide(
            request(prefix_hash=42), view(fleet_table, now_s=0.001 * i), candidates
        ).primary.replica_id
        for i in range(20)
    }
    assert len(homes) == 1  # not whichever sampled replica happened to score best


def test_round_robin_visits_every_replica_of_a_large_fleet_in_turn() -> None:
    replicas = mixed_fleet(64)
    candidates = loaded(replicas)
    profile = builtin_profiles()["round-robin"]
    fleet_table = table(replicas)
    order = [
        profile.decide(request(), view(fleet_table), candidates).primary.replica_id
        for _ in range(len(replicas))
    ]
    assert order == sorted(r.replica_id for r in replicas)


# -- behaviour under load ---------------------------------------------------------------------


def test_mi355x_replicas_get_capacity_proportional_shares_of_the_traffic() -> None:
    replicas = mixed_fleet(4)
    counts = simulate(capacity_profile(), table(replicas), decisions=100_000, lasting=1000)
    assert share_ratio(counts, replicas) == pytest.approx(CAPACITY_RATIO, rel=0.10)


def test_capacity_proportional_shares_survive_sampling_at_512_replicas() -> None:
    replicas = mixed_fleet(256)
    counts = simulate(capacity_profile(), table(replicas), decisions=100_000, lasting=30_000)
    assert share_ratio(counts, replicas) == pytest.approx(CAPACITY_RATIO, rel=0.10)
    assert len(counts) == len(replicas)


def test_least_requests_baseline_ignores_capacity() -> None:
    replicas = mixed_fleet(4)
    profile = builtin_profiles()["least-requests"]
    counts = simulate(profile, table(replicas), decisions=20_000, lasting=1000)
    assert share_ratio(counts, replicas) == pytest.approx(1.0, rel=0.05)


def test_a_prefix_stays_on_one_replica_while_load_allows_then_spills_under_the_bound() -> None:
    replicas = [replica(f"r{i}", Generation.MI355X) for i in range(8)]
    candidates = loaded(replicas, in_flight=100)  # ρ ≈ 0.08 everywhere
    by_id = {c.replica.replica_id: c for c in candidates}
    profile = capacity_profile()
    fleet_table = table(replicas)
    primaries = []
    for step in range(60):  # none of these requests finishes
        decision = profile.decide(
            request(prefix_hash=7), view(fleet_table, now_s=step * 0.001), candidates
        )
        by_id[decision.primary.replica_id].stats.in_flight += 1
        primaries.append(decision.primary.replica_id)
    home = primaries[0]
    stuck = next(i for i, r in enumerate(primaries) if r != home)
    assert stuck >= 20  # the home replica took every request while within the bound
    assert by_id[home].stats.in_flight <= 1.25 * (8 * 100 + 60) / 8 + 1  # and no more
    assert len(set(primaries[stuck:])) <= 2  # the overflow moved on together, not scattered


def test_without_a_prefix_the_same_stream_spreads_over_the_replicas() -> None:
    replicas = [replica(f"r{i}", Generation.MI355X) for i in range(8)]
    candidates = loaded(replicas, in_flight=100)
    by_id = {c.replica.replica_id: c for c in candidates}
    profile = capacity_profile()
    primaries = set()
    for step in range(16):
        decision = profile.decide(request(), view(table(replicas), now_s=step * 0.001), candidates)
        by_id[decision.primary.replica_id].stats.in_flight += 1
        primaries.add(decision.primary.replica_id)
    assert len(primaries) == 8


def test_a_fresh_candidate_list_per_request_gives_the_same_decisions() -> None:
    replicas = mixed_fleet(64)
    fleet = FleetState()
    fleet_table = table(replicas)
    fleet.sync(fleet_table)
    profile = capacity_profile()
    homes = {
        profile.decide(
            request(prefix_hash=5), view(fleet_table), fleet.candidates(fleet_table)
        ).primary.replica_id
        for _ in range(10)
    }
    assert len(homes) == 1


@settings(max_examples=60, deadline=None)
@given(
    states=st.lists(st.sampled_from(list(ReplicaState)), min_size=1, max_size=24),
    in_flight=st.lists(st.integers(0, 5000), min_size=24, max_size=24),
    prefix=st.none() | st.integers(0, 2**63),
    client_site=st.sampled_from([None, "kr", "us", "eu"]),
    profile_name=st.sampled_from(
        ["capacity", "round-robin", "least-requests", "power-of-two", "weighted-static"]
    ),
)
def test_any_decision_is_a_ready_replica_with_distinct_fallbacks_or_a_clear_error(
    states: list[ReplicaState],
    in_flight: list[int],
    prefix: int | None,
    client_site: str | None,
    profile_name: str,
) -> None:
    replicas = [
        replica(
            f"r{i:02d}",
            (Generation.MI300X, Generation.MI355X)[i % 2],
            site=("kr", "us")[i % 3 % 2],
            state=s,
        )
        for i, s in enumerate(states)
    ]
    candidates = loaded(replicas)
    for c, n in zip(candidates, in_flight, strict=False):
        c.stats.in_flight = n
    ctx = request(prefix_hash=prefix, client_site=client_site)
    profile = builtin_profiles()[profile_name]
    if all(s is not ReplicaState.READY for s in states):
        with pytest.raises(NoCandidateError) as caught:
            profile.decide(ctx, view(table(replicas)), candidates)
        assert caught.value.code is ErrorCode.UNAVAILABLE
        return
    decision = profile.decide(ctx, view(table(replicas)), candidates)
    tried = [decision.primary, *decision.fallbacks]
    assert all(r.state is ReplicaState.READY for r in tried)
    assert len({r.replica_id for r in tried}) == len(tried)
    assert len(decision.fallbacks) == min(3, sum(s is ReplicaState.READY for s in states) - 1)


def test_a_spec_is_frozen_data_and_each_profile_over_it_keeps_its_own_random_source() -> None:
    """The spec holds no generator or cache: two profiles over one spec draw the same samples,
    and one's decisions do not move the other's random source."""
    shown: list[tuple[str, ...]] = []

    class SampleScorer(SpyScorer):
        def score(
            self, ctx: RequestContext, view: RoutingView, candidates: Sequence[Candidate]
        ) -> list[float]:
            shown.append(tuple(sorted(c.replica.replica_id for c in candidates)))
            return [0.5] * len(candidates)

    spec = ProfileSpec("spy", (), (ScorerStep(SampleScorer(), 1.0),), MaxScorePicker())
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.seed = 1  # type: ignore[misc]
    assert [f.name for f in dataclasses.fields(spec)] == [
        "name", "filters", "scorers", "picker", "max_fallbacks", "sample_size", "seed",
    ]  # fmt: skip
    replicas = mixed_fleet(256)
    candidates = loaded(replicas)

    def samples(profile: Profile, count: int) -> list[tuple[str, ...]]:
        shown.clear()
        for _ in range(count):
            profile.decide(request(), view(table(replicas)), candidates)
        return list(shown)

    first = Profile(spec)
    ahead = samples(first, 20)
    assert len(set(ahead)) > 1  # a fresh sample each decision
    assert samples(Profile(spec), 20) == ahead
    assert samples(first, 5) != ahead[:5]  # the first one went on from where it was


def test_reseeded_profiles_draw_apart_and_the_same_salt_draws_the_same() -> None:
    """Routers built from one profile with one seed would break every tie the same way."""
    routing_table = table(replica(f"r{i}") for i in range(16))
    fleet = FleetState()
    fleet.sync(routing_table)

    def picks(salt: int | None) -> list[str]:
        profile = builtin_profiles()["capacity"]
        if salt is not None:
            profile.reseed(salt)
        return [
            profile.decide(
                request(), view(routing_table), fleet.candidates(routing_table)
            ).primary.replica_id
            for _ in range(20)
        ]

    assert picks(1) == picks(1)
    assert picks(1) != picks(2)
    assert picks(None) != picks(1)
