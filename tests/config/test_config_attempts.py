"""The `router.attempts` config section reaches the router: validated with the field named,
carried as `orchestrator router` flags, and turned into the dispatcher's bounds."""

from __future__ import annotations

import pytest

from orchestrator.cli import build_parser
from orchestrator.cli.router_attempts import with_attempts
from orchestrator.config import ConfigError, default_config, parse_config
from orchestrator.router_service import RouterSettings

BASE = """apiVersion: orchestrator/v1alpha1
kind: Orchestrator
sites: {lab: {}}
pools: [{name: p, site: lab, generation: MI355X, engine: sim, replicas: 1}]
"""


def settings_from(flags: list[str], latency_scale: float = 1.0) -> RouterSettings:
    args = build_parser().parse_args(["router", "--config", "replicas.yaml", *flags])
    return with_attempts(RouterSettings(latency_scale=latency_scale), args)


def test_the_default_section_gives_the_routers_own_defaults() -> None:
    assert settings_from(default_config().router.attempts.router_flags()) == RouterSettings()


def test_a_configured_section_reaches_the_dispatcher_stretched_by_the_latency_scale() -> None:
    config = parse_config(
        BASE + "router:\n  attempts: {firstByteTimeoutS: 5, stallTimeoutS: 0, migrations: 0}\n"
    )
    settings = settings_from(config.router.attempts.router_flags(), latency_scale=10.0)
    dispatch = settings.dispatch_settings(settings.wall_slo)
    assert dispatch.first_byte_timeout_s == 50.0
    assert dispatch.stall_timeout_s is None  # 0 turns the bound off
    assert dispatch.migration_attempts == 0


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ("{stallTimeoutS: -1}", "stallTimeoutS"),
        ("{firstByteTimeoutS: .inf}", "firstByteTimeoutS"),
        ("{migrations: -2}", "migrations"),
        ("{retries: 3}", "retries"),
    ],
)
def test_bad_values_are_refused_naming_the_field(section: str, field: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(BASE + f"router:\n  attempts: {section}\n")
    assert f"router.attempts.{field}" in error.value.message


@pytest.mark.parametrize("flag", ["--stall-timeout=-1", "--first-byte-timeout=inf"])
def test_bad_flags_exit_2(flag: str) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["router", "--config", "replicas.yaml", flag])
    assert exited.value.code == 2
