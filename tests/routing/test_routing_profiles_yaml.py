"""Profiles from YAML: the built-ins load, and every mistake is refused naming its field."""

from __future__ import annotations

from importlib import resources

import pytest

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.routing.plugins import builtin_registry
from orchestrator.routing.profiles import DEFAULT_PROFILE, builtin_profiles, load_profiles

HEADER = "apiVersion: orchestrator/v1alpha1\nkind: RoutingProfiles\n"

GOOD = (
    HEADER
    + """
profiles:
  - name: mine
    sampleSize: 4
    filters:
      - {type: model-served}
      - {type: kv-headroom, name: kv, soft: true, params: {maxKvUsage: 0.9}}
    scorers:
      - {type: capacity-headroom, weight: 2.0}
      - {type: prefix-affinity, weight: 0.5, params: {loadFactor: 0.1}}
    picker: {type: max-score, params: {seed: 3}}
"""
)


def test_the_builtin_profiles_load_with_capacity_as_the_default() -> None:
    profiles = builtin_profiles()
    assert set(profiles) == {
        "capacity",
        "round-robin",
        "least-requests",
        "power-of-two",
        "weighted-static",
    }
    capacity = profiles[DEFAULT_PROFILE].spec
    assert [(s.plugin.TYPE, s.soft) for s in capacity.filters] == [
        ("model-served", False),
        ("healthy", False),
        ("not-draining", False),
        ("load-known", True),
        ("kv-headroom", True),
        ("fabric-healthy", True),
        ("slo-reserved", False),
    ]
    assert [(s.plugin.TYPE, s.weight) for s in capacity.scorers] == [
        ("capacity-headroom", 1.0),
        ("prefix-affinity", 0.3),
        ("site-locality", 0.5),
        ("latency-slo", 0.3),
    ]
    assert capacity.picker.TYPE == "max-score"
    assert capacity.sample_size == 8


@pytest.mark.parametrize(
    ("name", "picker"),
    [
        ("round-robin", "round-robin"),
        ("least-requests", "max-score"),
        ("power-of-two", "power-of-two"),
        ("weighted-static", "weighted-random"),
    ],
)
def test_every_baseline_profile_keeps_the_hard_filters(name: str, picker: str) -> None:
    profile = builtin_profiles()[name]
    assert [s.plugin.TYPE for s in profile.spec.filters if not s.soft] == [
        "model-served",
        "healthy",
        "not-draining",
    ]
    assert picker == profile.spec.picker.TYPE


def test_the_builtin_file_ships_inside_the_package() -> None:
    assert (resources.files("orchestrator.routing") / "data" / "profiles.yaml").is_file()


def test_each_call_builds_fresh_profiles_so_state_is_not_shared() -> None:
    assert (
        builtin_profiles()["capacity"].spec.picker is not builtin_profiles()["capacity"].spec.picker
    )


def test_a_profile_file_sets_names_params_and_sample_size() -> None:
    profile = load_profiles(GOOD)["mine"]
    assert profile.spec.sample_size == 4
    assert profile.spec.filters[1].plugin.name == "kv"
    assert profile.spec.filters[1].soft
    assert [s.weight for s in profile.spec.scorers] == [2.0, 0.5]


def test_every_registered_type_builds_with_default_params() -> None:
    registry = builtin_registry()
    for plugin_type in registry.types:
        assert plugin_type == registry.build(plugin_type, plugin_type, {}).TYPE


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD.replace("sampleSize: 4", "sampleSize: 0"), "profile `mine`: sampleSize"),
        (GOOD.replace("sampleSize: 4", "samplesize: 4"), "profile `mine`: samplesize"),
        (GOOD.replace("weight: 2.0", "weight: -1"), "profile `mine`: scorers[0].weight"),
        (GOOD.replace("weight: 2.0", "wieght: 2.0"), "profile `mine`: scorers[0]"),
        (GOOD.replace("soft: true", "soft: maybe"), "profile `mine`: filters[1].soft"),
        (GOOD.replace("{type: max-score, ", "{"), "profile `mine`: picker.type"),
        (
            GOOD.replace("maxKvUsage: 0.9", "maxKvUsage: 2"),
            "profile `mine`: filters[1].params.maxKvUsage",
        ),
        (
            GOOD.replace("loadFactor: 0.1", "loadFactr: 0.1"),
            "profile `mine`: scorers[1].params.loadFactr",
        ),
        (GOOD.replace("type: capacity-headroom", "type: capacity"), "scorers[0].type"),
        (GOOD.replace("{type: model-served}", "{type: max-score}"), "filters[0].type"),
        (
            GOOD.replace("{type: max-score, params: {seed: 3}}", "{type: round-robin}"),
            "ignores scores",
        ),
        (GOOD.replace("orchestrator/v1alpha1", "orchestrator/v2"), "apiVersion"),
        (GOOD.replace("RoutingProfiles", "Profiles"), "kind"),
        (GOOD + GOOD.split("profiles:\n")[1], "duplicate profile names: mine"),
        (HEADER + "profiles: []\n", "profiles"),
        (GOOD.replace("weight: 2.0}", "weight: .inf}"), "scorers[0].weight"),
        (GOOD.replace("weight: 2.0}", "weight: .nan}"), "scorers[0].weight"),
        ("profiles: [\n", "not YAML"),
        (
            GOOD.replace("weight: 2.0}", "weight: 2.0, weight: 0.1}"),
            "profiles[0].scorers[0].weight: found duplicate key 'weight'",
        ),
    ],
)
def test_a_bad_profile_file_is_refused_naming_the_profile_and_field(
    text: str, expected: str
) -> None:
    with pytest.raises(OrchestratorError) as caught:
        load_profiles(text, source="test.yaml")
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.message.startswith("test.yaml: ")
    assert expected in caught.value.message


def test_an_unknown_plugin_type_lists_the_known_ones() -> None:
    with pytest.raises(OrchestratorError, match=r"known types: .*capacity-headroom"):
        load_profiles(GOOD.replace("type: capacity-headroom", "type: capacity"))
