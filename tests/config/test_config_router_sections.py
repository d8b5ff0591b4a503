"""The `router.breaker`, `router.upstream`, `router.http`, `router.grpc` and `router.timing`
sections reach the router: validated with the field named, carried as `orchestrator router`
flags, and turned into the settings the circuit breakers, the connection pool, the front ends
and the router run with."""

from __future__ import annotations

import argparse

import pytest

from orchestrator.cli import build_parser, router_attempts, router_limits, router_replicas
from orchestrator.config import ConfigError, default_config, parse_config
from orchestrator.config.flags import from_args, to_flags
from orchestrator.config.grpc import GrpcSpec
from orchestrator.core.errors import OrchestratorError
from orchestrator.frontends.grpc.server import GrpcSettings
from orchestrator.frontends.http.settings import HttpSettings
from orchestrator.router_service import RouterSettings

BASE = """apiVersion: orchestrator/v1alpha1
kind: Orchestrator
sites: {lab: {}}
pools: [{name: p, site: lab, generation: MI355X, engine: sim, replicas: 1}]
"""


def router_args(flags: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(["router", "--config", "replicas.yaml", *flags])


def test_the_sections_reach_the_breakers_and_the_pool_through_the_flags() -> None:
    defaults = router_args([*to_flags(default_config().router.breaker)])
    assert router_replicas.breaker_settings(defaults) == RouterSettings().breaker
    assert router_replicas.upstream_settings(defaults, None) == RouterSettings().upstream
    config = parse_config(
        BASE + "router:\n  breaker: {failureThreshold: 7, openS: 0.25}\n"
        "  upstream: {limit: 64, limitPerHost: 8, keepaliveS: 1.5, maxAnswerBytes: 1024}\n"
    )
    args = router_args([*to_flags(config.router.breaker), *to_flags(config.router.upstream)])
    breaker = router_replicas.breaker_settings(args)
    assert (breaker.failure_threshold, breaker.open_s) == (7, 0.25)
    upstream = router_replicas.upstream_settings(args, None)
    assert upstream.model_dump(exclude={"replica_tls"}) == config.router.upstream.model_dump()


def test_the_http_section_and_the_slow_reader_cap_reach_the_front_end() -> None:
    assert router_limits.http_settings(router_args([]), None) == HttpSettings()
    config = parse_config(
        BASE + "router:\n  http: {maxBodyBytes: 4096}\n  admission: {streamBufferBytes: 512}\n"
    )
    flags = [*to_flags(config.router.http), *config.router.admission.router_flags()]
    http = router_limits.http_settings(router_args(flags), None)
    assert (http.max_body_bytes, http.stream_buffer_bytes, http.api_keys) == (4096, 512, None)
    with pytest.raises(OrchestratorError, match="max_body_bytes") as error:
        HttpSettings(max_body_bytes=0)
    assert error.value.param == "max_body_bytes"


def test_the_timing_section_gives_the_routers_deadline_and_freshness() -> None:
    defaults = router_attempts.timing(router_args([]))
    assert RouterSettings(**defaults.model_dump()) == RouterSettings()
    config = parse_config(BASE + "router:\n  timing: {requestDeadlineS: 30, loadStaleAfterS: 9}\n")
    timing = router_attempts.timing(router_args(to_flags(config.router.timing)))
    settings = RouterSettings(**timing.model_dump(), latency_scale=2.0)
    assert (settings.scaled_deadline_s, settings.load_stale_after_s) == (60.0, 9.0)
    for field, value in (("latency_scale", 0.0), ("request_deadline_s", float("inf"))):
        with pytest.raises(OrchestratorError, match=field) as error:
            RouterSettings(**{field: value})
        assert error.value.param == field


def test_the_grpc_section_reaches_the_grpc_server_through_the_flags() -> None:
    assert GrpcSettings(**from_args(GrpcSpec, router_args([])).model_dump()) == GrpcSettings()
    config = parse_config(BASE + "router:\n  grpc: {graceS: 2, maxMessageBytes: 1024}\n")
    args = router_args(to_flags(config.router.grpc))
    grpc = GrpcSettings(**from_args(GrpcSpec, args).model_dump())
    assert (grpc.grace_s, grpc.max_message_bytes, grpc.idle_s) == (2.0, 1024, 75.0)
    with pytest.raises(OrchestratorError, match="handshake_s") as error:
        GrpcSettings(handshake_s=0)
    assert error.value.param == "handshake_s"


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ("breaker: {failureThreshold: 0}", "breaker.failureThreshold"),
        ("breaker: {openS: -1}", "breaker.openS"),
        ("upstream: {keepaliveS: 0}", "upstream.keepaliveS"),
        ("upstream: {limitPerHost: 0}", "upstream.limitPerHost"),
        ("upstream: {connections: 3}", "upstream.connections"),
        ("http: {maxBodyBytes: 0}", "http.maxBodyBytes"),
        ("timing: {connectTimeoutS: 0}", "timing.connectTimeoutS"),
        ("grpc: {idleS: .nan}", "grpc.idleS"),
    ],
)
def test_bad_values_are_refused_naming_the_field(section: str, field: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(BASE + f"router:\n  {section}\n")
    assert f"router.{field}" in error.value.message


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--breaker-failures", "0"),
        ("--breaker-open", "nan"),
        ("--upstream-limit", "lots"),
        ("--max-body-bytes", "0"),
        ("--request-deadline", "-5"),
        ("--grpc-grace", "0"),
        ("--grpc-idle", "3e6"),  # gRPC takes it as a C int of milliseconds
        ("--grpc-max-message-bytes", str(2**31)),
    ],
)
def test_a_bad_flag_names_the_flag_and_the_value(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        router_args([flag, value])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert flag in error and repr(value) in error
