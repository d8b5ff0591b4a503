"""Whatever a config file holds, loading it yields a config or a `ConfigError`, nothing else."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.config import ConfigError, OrchestratorConfig, dump_config, validate_config
from orchestrator.config.loader import parse_config

BASE: dict[str, Any] = {
    "apiVersion": "orchestrator/v1alpha1",
    "kind": "Orchestrator",
    "sites": {"kr": {"rttMs": {"us": 150}}, "us": {"rttMs": {"kr": 150}}},
    "pools": [
        {"name": "kr-mi300x", "site": "kr", "generation": "MI300X", "engine": "sim",
         "replicas": 2, "timeScale": 10},
        {"name": "us-mi355x", "site": "us", "generation": "MI355X", "engine": "vllm",
         "replicas": 2, "gpusPerReplica": 1, "engineArgs": ["--x"]},
        {"name": "us-ext", "site": "us", "generation": "MI300X", "engine": "external",
         "endpoints": ["http://10.0.0.1:8000"]},
    ],
    "router": {"profile": "capacity", "httpPort": 8000, "grpcPort": 50051, "latencyScale": 2},
    "controlPlane": {"grpcPort": 50052},
    "exporters": {"port": 9400},
}  # fmt: skip

# Values a user might plausibly write, right or wrong, for any field.
PLAUSIBLE = st.sampled_from(
    [
        "kr", "us", "eu", "", "MI300X", "mi355", "75a3", "MI999X", "AMD-Instinct-MI355X-OAM",
        "sim", "vllm", "SGLang", "external", "capacity", "fastest", "http://10.0.0.2:8000",
        "10.0.0.2:8000", "Orchestrator", "orchestrator/v1alpha1", "timeScale", 0, 1, 2, -1,
        8000, 50051, 65536, 1.5, -0.5, 0.0, True, None, [], {}, ["--y"], {"us": 10},
    ]
)  # fmt: skip
JUNK = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
VALUES = PLAUSIBLE | JUNK


def _containers(node: Any, out: list[Any]) -> list[Any]:
    if isinstance(node, dict | list):
        out.append(node)
        for child in node.values() if isinstance(node, dict) else node:
            _containers(child, out)
    return out


def _fresh(draw: st.DrawFn) -> Any:
    """A drawn value, copied: later mutations must not change what hypothesis drew."""
    return copy.deepcopy(draw(VALUES))


@st.composite
def mutated_configs(draw: st.DrawFn) -> dict[str, Any]:
    document = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 4))):
        target = draw(st.sampled_from(_containers(document, [])))
        keys = list(target) if isinstance(target, dict) else list(range(len(target)))
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "add" or not keys:
            if isinstance(target, dict):
                key = draw(st.text(max_size=10) | st.sampled_from(["name", "replicas"]))
                target[key] = _fresh(draw)
            else:
                target.append(_fresh(draw))
        elif action == "delete":
            del target[draw(st.sampled_from(keys))]
        else:
            target[draw(st.sampled_from(keys))] = _fresh(draw)
    return document


def _check(document: Any) -> None:
    try:
        config = validate_config(document, source="fuzz")
    except ConfigError as error:
        assert error.problems
        assert all(line.startswith("fuzz: ") for line in error.message.splitlines())
        return
    assert isinstance(config, OrchestratorConfig)
    assert parse_config(dump_config(config)) == config


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_configs())
def test_a_mutated_config_loads_or_raises_a_config_error(document: dict[str, Any]) -> None:
    _check(document)
    try:
        text = yaml.safe_dump(document)
    except yaml.YAMLError:
        return
    with contextlib.suppress(ConfigError):
        parse_config(text, source="fuzz")


@settings(max_examples=200, deadline=None)
@given(JUNK)
def test_any_yaml_value_at_all_loads_or_raises_a_config_error(document: Any) -> None:
    _check(document)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_any_text_loads_or_raises_a_config_error(text: str) -> None:
    with contextlib.suppress(ConfigError):
        parse_config(text, source="fuzz")
