"""The orchestrator config: good files load into frozen models, and every mistake is refused loudly.

A refusal is one `ConfigError` naming the source, the field's path and the allowed values, with a
line per problem, so one edit fixes them all.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from orchestrator.config import (
    BUILTIN_PROFILE_NAMES,
    ConfigError,
    OrchestratorConfig,
    dump_config,
    load_config,
    parse_config,
    validate_config,
)
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind
from orchestrator.routing.profiles import builtin_profiles

GOOD: dict[str, Any] = {
    "apiVersion": "orchestrator/v1alpha1",
    "kind": "Orchestrator",
    "sites": {"kr": {"rttMs": {"us": 150}}, "us": {"rttMs": {"kr": 150}}},
    "pools": [
        {
            "name": "kr-mi300x",
            "site": "kr",
            "generation": "MI300X",
            "engine": "sim",
            "replicas": 2,
            "timeScale": 10,
        },
        {
            "name": "us-mi355x",
            "site": "us",
            "generation": "MI355X",
            "engine": "vllm",
            "replicas": 2,
            "engineArgs": ["--max-num-seqs", "256"],
        },
        {
            "name": "us-legacy",
            "site": "us",
            "generation": "MI300X",
            "engine": "external",
            "endpoints": ["http://10.1.0.9:8000"],
        },
    ],
}


def good(**changes: Any) -> dict[str, Any]:
    """A copy of GOOD; `changes` replace top-level keys (None removes one)."""
    document = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if value is None:
            document.pop(key, None)
        else:
            document[key] = value
    return document


def with_pool(index: int, **fields: Any) -> dict[str, Any]:
    """GOOD with pool `index` changed; a field set to None is removed."""
    document = good()
    pool = document["pools"][index]
    for key, value in fields.items():
        if value is None:
            pool.pop(key, None)
        else:
            pool[key] = value
    return document


def refusal(document: Any, source: str = "orchestrator.yaml") -> ConfigError:
    text = document if isinstance(document, str) else yaml.safe_dump(document, sort_keys=False)
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source=source)
    error = caught.value
    assert error.code is ErrorCode.INVALID_ARGUMENT
    assert all(line.startswith(f"{source}: ") for line in error.message.splitlines())
    return error


# --- what loads -----------------------------------------------------------------------------


def test_a_good_config_loads_into_frozen_models_with_generations_and_engines_normalised() -> None:
    config = validate_config(good())
    assert [p.name for p in config.pools] == ["kr-mi300x", "us-mi355x", "us-legacy"]
    assert [p.generation for p in config.pools] == [
        Generation.MI300X,
        Generation.MI355X,
        Generation.MI300X,
    ]
    assert [p.engine for p in config.pools] == [
        EngineKind.SIM,
        EngineKind.VLLM,
        EngineKind.EXTERNAL,
    ]
    assert config.pools[1].engine_args == ("--max-num-seqs", "256")
    assert config.model == "openai/gpt-oss-120b"
    with pytest.raises(ValidationError):
        config.pools[0].replicas = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("spelling", "generation"),
    [
        ("AMD-Instinct-MI355X-OAM", Generation.MI355X),
        ("75a3", Generation.MI355X),
        ("AMD_Instinct_MI355_OAM", Generation.MI355X),
        ("mi300x", Generation.MI300X),
        ("AMD Instinct MI300X", Generation.MI300X),
        ("0x74a1", Generation.MI300X),
    ],
)
def test_a_pool_generation_may_be_given_in_any_spelling_users_meet(
    spelling: str, generation: Generation
) -> None:
    config = validate_config(with_pool(0, generation=spelling))
    assert config.pools[0].generation is generation


def test_engine_names_are_read_in_any_case() -> None:
    assert validate_config(with_pool(1, engine="vLLM")).pools[1].engine is EngineKind.VLLM


def test_an_rtt_given_one_way_holds_both_ways() -> None:
    config = validate_config(good(sites={"kr": {"rttMs": {"us": 150}}, "us": None}))
    assert config.rtt_ms("us", "kr") == config.rtt_ms("kr", "us") == 150
    assert config.rtt_ms("kr", "kr") == 0
    records = config.site_records()
    assert records["us"].rtt_to("kr") == pytest.approx(0.150)
    assert records["kr"].rtt_to("us") == pytest.approx(0.150)


def test_router_latency_scale_defaults_to_the_slowest_simulated_pool() -> None:
    document = with_pool(1, engine="sim", timeScale=25, engineArgs=None)
    assert validate_config(document).router.latency_scale == 25
    without_sim = good(pools=[GOOD["pools"][2]])
    assert validate_config(without_sim).router.latency_scale == 1.0
    explicit = good(router={"latencyScale": 4})
    assert validate_config(explicit).router.latency_scale == 4


def test_a_simulated_pool_without_a_time_scale_runs_in_real_time() -> None:
    config = validate_config(with_pool(0, timeScale=None))
    assert config.pools[0].time_scale == 1.0
    assert config.pools[1].time_scale is None


def test_services_get_their_documented_ports_unless_told_otherwise() -> None:
    config = validate_config(good())
    assert (config.router.http_port, config.router.grpc_port) == (8000, 50051)
    assert config.control_plane.grpc_port == 50052
    assert config.exporters.port == 9400
    assert config.router.profile == "capacity"


def test_an_external_pool_may_be_discovered_by_selector_instead_of_listing_endpoints() -> None:
    config = validate_config(
        with_pool(2, endpoints=None, selector={"app.kubernetes.io/name": "vllm"})
    )
    assert config.pools[2].selector == {"app.kubernetes.io/name": "vllm"}
    assert config.pools[2].replicas is None
    assert [p.name for p in config.launched_pools] == ["kr-mi300x", "us-mi355x"]


def test_endpoint_urls_lose_a_trailing_slash() -> None:
    config = validate_config(with_pool(2, endpoints=["https://vllm.us.example:8443/"]))
    assert config.pools[2].endpoints == ("https://vllm.us.example:8443",)


def test_a_dumped_config_reads_back_equal() -> None:
    config = validate_config(good())
    assert parse_config(dump_config(config)) == config


def test_the_router_profiles_config_accepts_are_the_ones_routing_ships() -> None:
    assert set(BUILTIN_PROFILE_NAMES) == set(builtin_profiles())


def test_asking_for_an_unknown_pool_names_the_pools_there_are() -> None:
    config = validate_config(good())
    assert config.pool("us-mi355x").generation is Generation.MI355X
    expected = r"unknown pool 'eu-mi355x'; pools: kr-mi300x"
    with pytest.raises(OrchestratorError, match=expected) as caught:
        config.pool("eu-mi355x")
    assert caught.value.code is ErrorCode.NOT_FOUND


def test_load_config_reads_a_file_and_names_it_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "orchestrator.yaml"
    path.write_text(yaml.safe_dump(good()))
    assert isinstance(load_config(path), OrchestratorConfig)
    path.write_text(yaml.safe_dump(with_pool(0, replicas=-1)))
    with pytest.raises(ConfigError, match=rf"^{path}: pools\[0\]\.replicas: "):
        load_config(path)


def test_a_missing_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.yaml"
    with pytest.raises(ConfigError, match=rf"^{path}: cannot read the file: No such file"):
        load_config(path)


# --- what is refused ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        pytest.param(
            with_pool(0, generation="MI999X"),
            "pools[0].generation: unknown GPU generation 'MI999X'; known generations: MI300X,",
            id="unknown-generation-quoted",
        ),
        pytest.param(
            with_pool(1, site="eu"),
            "pools[1].site: unknown site 'eu'; known sites (under sites): kr, us",
            id="unknown-site",
        ),
        pytest.param(
            with_pool(0, replicas=-1),
            "pools[0].replicas: Input should be greater than or equal to 0; got -1",
            id="negative-replicas",
        ),
        pytest.param(
            with_pool(1, name="kr-mi300x"),
            "pools[1].name: duplicate pool name 'kr-mi300x' (first at pools[0])",
            id="duplicate-pool-names",
        ),
        pytest.param(
            good(router={"httpPort": 70000}),
            "router.httpPort: must be a port number in 1..65535, got 70000",
            id="port-out-of-range",
        ),
        pytest.param(
            good(router={"httpPort": 0}),
            "router.httpPort: must be a port number in 1..65535, got 0",
            id="port-zero",
        ),
        pytest.param(
            good(controlPlane={"grpcPort": 8000}),
            "controlPlane.grpcPort: port 8000 is also router.httpPort; every service needs its",
            id="two-services-on-one-port",
        ),
        pytest.param(
            good(replicaCount=3),
            "replicaCount: unknown key; allowed keys: apiVersion, kind, model, sites, pools,",
            id="unknown-top-level-key",
        ),
        pytest.param(
            with_pool(0, timescale=3),
            "pools[0].timescale: unknown key (did you mean timeScale?); allowed keys: name,",
            id="unknown-pool-key-with-a-suggestion",
        ),
        pytest.param(
            good(router={"port": 8000}),
            "router.port: unknown key (did you mean httpPort?); allowed keys: profile, httpPort,",
            id="unknown-router-key",
        ),
        pytest.param(
            with_pool(1, timeScale=10),
            "pools[1].timeScale: only simulated pools (engine: sim) have a time scale; remove it"
            " for engine 'vllm'",
            id="time-scale-on-a-vllm-pool",
        ),
        pytest.param(
            with_pool(2, endpoints=None),
            "pools[2].endpoints: an external pool needs at least one endpoint URL, or a selector",
            id="external-without-endpoints",
        ),
        pytest.param(
            with_pool(2, endpoints=[]),
            "pools[2].endpoints: an external pool needs at least one endpoint URL",
            id="external-with-an-empty-endpoint-list",
        ),
        pytest.param(
            with_pool(2, replicas=2),
            "pools[2].replicas: an external pool is sized by its endpoints",
            id="replicas-on-an-external-pool",
        ),
        pytest.param(
            with_pool(2, engineArgs=["--x"]),
            "pools[2].engineArgs: external replicas are not started by the orchestrator",
            id="engine-args-on-an-external-pool",
        ),
        pytest.param(
            with_pool(0, endpoints=["http://10.0.0.1:8000"]),
            "pools[0].endpoints: only external pools have endpoints",
            id="endpoints-on-a-simulated-pool",
        ),
        pytest.param(
            with_pool(1, selector={"app": "vllm"}),
            "pools[1].selector: only external pools have selector",
            id="selector-on-a-vllm-pool",
        ),
        pytest.param(
            with_pool(1, replicas=None),
            "pools[1].replicas: required for engine 'vllm'",
            id="launched-pool-without-replicas",
        ),
        pytest.param(
            with_pool(0, engine="tgi"),
            "pools[0].engine: Input should be 'sim', 'vllm', 'sglang' or 'external'; got 'tgi'",
            id="unknown-engine",
        ),
        pytest.param(
            with_pool(0, timeScale=0),
            "pools[0].timeScale: Input should be greater than 0; got 0",
            id="time-scale-zero",
        ),
        pytest.param(
            with_pool(0, timeScale=float("inf")),
            "pools[0].timeScale: Input should be a finite number",
            id="time-scale-infinite",
        ),
        pytest.param(
            with_pool(0, replicas=True),
            "pools[0].replicas: Input should be a valid integer; got True",
            id="replicas-as-a-boolean",
        ),
        pytest.param(
            with_pool(0, gpusPerReplica=0),
            "pools[0].gpusPerReplica: Input should be greater than or equal to 1; got 0",
            id="zero-gpus-per-replica",
        ),
        pytest.param(
            with_pool(0, name="KR_MI300X"),
            "pools[0].name: 'KR_MI300X' is not a valid name: use lowercase letters a-z, digits",
            id="pool-name-not-a-dns-label",
        ),
        pytest.param(
            with_pool(2, endpoints=["10.1.0.9:8000"]),
            "pools[2].endpoints[0]: must be the http(s) URL of a server's root",
            id="endpoint-not-a-url",
        ),
        pytest.param(
            with_pool(2, endpoints=["http://10.1.0.9:8000", "http://10.1.0.9:8000/"]),
            "pools[2].endpoints[1]: endpoint 'http://10.1.0.9:8000' is listed twice (first at"
            " pools[2].endpoints[0])",
            id="duplicate-endpoint",
        ),
        pytest.param(
            good(router={"profile": "fastest"}),
            "router.profile: unknown routing profile 'fastest'; built-in profiles: capacity,"
            " round-robin, least-requests, power-of-two, weighted-static",
            id="unknown-profile",
        ),
        pytest.param(
            good(router={"latencyScale": -1}),
            "router.latencyScale: Input should be greater than 0; got -1",
            id="negative-latency-scale",
        ),
        pytest.param(
            good(sites={"kr": {"rttMs": {"us": 150, "eu": 90}}, "us": {}}),
            "sites.kr.rttMs.eu: unknown site 'eu'; known sites: kr, us",
            id="rtt-to-an-unknown-site",
        ),
        pytest.param(
            good(sites={"kr": {"rttMs": {"us": -5}}, "us": {}}),
            "sites.kr.rttMs.us: an RTT must be >= 0 ms, got -5",
            id="negative-rtt",
        ),
        pytest.param(
            good(sites={"kr": {"rttMs": {"us": 150}}, "us": {"rttMs": {"kr": 120}}}),
            "sites.kr.rttMs.us: 150 ms here but sites.us.rttMs.kr says 120 ms",
            id="asymmetric-rtt",
        ),
        pytest.param(
            good(sites={"kr": {}, "us": {}}),
            "sites.kr.rttMs: no RTT between sites 'kr' and 'us'",
            id="missing-rtt",
        ),
        pytest.param(
            good(sites={"kr": {"rttMs": {"us": 150, "kr": 0}}, "us": {}}),
            "sites.kr.rttMs.kr: a site's RTT to itself is 0 by definition",
            id="rtt-to-itself",
        ),
        pytest.param(
            good(sites={}),
            "sites: Dictionary should have at least 1 item after validation",
            id="no-sites",
        ),
        pytest.param(
            good(apiVersion="orchestrator/v1"),
            "apiVersion: Input should be 'orchestrator/v1alpha1'; got 'orchestrator/v1'",
            id="wrong-api-version",
        ),
        pytest.param(
            good(kind="Replicas"),
            "kind: Input should be 'Orchestrator'; got 'Replicas'",
            id="wrong-kind",
        ),
        pytest.param(good(pools=None), "pools: required, but missing", id="no-pools-key"),
    ],
)
def test_a_bad_config_is_refused_naming_the_field(document: Any, expected: str) -> None:
    lines = refusal(document).message.splitlines()
    assert any(line.startswith(f"orchestrator.yaml: {expected}") for line in lines), lines


def test_every_problem_is_reported_at_once_one_per_line() -> None:
    document = good(router={"profile": "fastest"})
    document["pools"][0]["generation"] = "MI999X"
    document["pools"][1]["site"] = "eu"
    document["pools"][2]["name"] = "kr-mi300x"
    error = refusal(document)
    lines = error.message.splitlines()
    assert sorted(p.path for p in error.problems) == [
        "pools[0].generation",
        "pools[1].site",
        "pools[2].name",
        "router.profile",
    ]
    assert len(lines) == 4
    assert error.param == error.problems[0].path


def test_cross_field_problems_are_found_among_the_parts_of_a_malformed_document() -> None:
    document = good(controlPlane={"grpcPort": 8000}, exporters={"port": "any"})
    document["router"] = None  # refused, and read as its default ports
    document["pools"][2]["generation"] = "MI999X"
    document["pools"][2]["endpoints"] = ["http://10.1.0.9:8000", "http://10.1.0.9:8000/", 3]
    document["sites"]["kr"]["rttMs"]["eu"] = -1
    lines = refusal(document).message.splitlines()
    assert sorted(line.removeprefix("orchestrator.yaml: ").split(":")[0] for line in lines) == [
        "controlPlane.grpcPort",  # also the router's default httpPort
        "exporters.port",
        "pools[2].endpoints[1]",  # listed twice, in a pool whose generation is bad
        "pools[2].endpoints[2]",
        "pools[2].generation",
        "router",
        "sites.kr.rttMs.eu",  # negative, and no such site: both said
        "sites.kr.rttMs.eu",
    ], lines


def test_yaml_syntax_errors_give_line_and_column() -> None:
    error = refusal("apiVersion: orchestrator/v1alpha1\nkind: Orchestrator\nsites: {kr: [\n")
    assert "YAML syntax error at line 4, column 1" in error.message


def test_a_key_given_twice_is_refused_rather_than_silently_overwritten() -> None:
    text = yaml.safe_dump(good(), sort_keys=False) + "kind: Orchestrator\n"
    error = refusal(text)
    assert "found duplicate key 'kind'" in error.message
    assert "line " in error.message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "the document is empty; expected a mapping starting with `apiVersion:"),
        ("- a\n- b\n", "expected a mapping starting with `apiVersion: orchestrator/v1alpha1`"),
    ],
)
def test_a_document_that_is_not_a_mapping_is_refused(text: str, expected: str) -> None:
    assert expected in refusal(text).message
