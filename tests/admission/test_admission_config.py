"""The `router.admission` config section reaches the router: validated with the field named,
carried as `orchestrator router` flags, and turned into the settings admission runs with."""

from __future__ import annotations

import pytest

from orchestrator.admission.settings import AdmissionSettings
from orchestrator.cli import build_parser
from orchestrator.cli.router_limits import admission_settings
from orchestrator.config import ConfigError, default_config, parse_config
from orchestrator.routing.context import Priority

BASE = """apiVersion: orchestrator/v1alpha1
kind: Orchestrator
sites: {lab: {}}
pools: [{name: p, site: lab, generation: MI355X, engine: sim, replicas: 1}]
"""


def router_args(flags: list[str]) -> list[str]:
    return ["router", "--config", "replicas.yaml", *flags]


def test_defaults_are_on_and_match_the_routers_own() -> None:
    spec = default_config().router.admission
    args = build_parser().parse_args(router_args(spec.router_flags()))
    assert admission_settings(args) == AdmissionSettings()
    assert args.stream_buffer_bytes == spec.stream_buffer_bytes


def test_a_configured_section_reaches_the_settings() -> None:
    config = parse_config(
        BASE + "router:\n  admission: {enabled: false, maxQueue: 7, queueTimeoutS: 0.5,"
        " batchReserve: 0.3, capacityFactor: 1.5, defaultPriority: batch,"
        " streamBufferBytes: 4096}\n"
    )
    args = build_parser().parse_args(router_args(config.router.admission.router_flags()))
    settings = admission_settings(args)
    assert settings == AdmissionSettings(
        enabled=False, max_queue=7, queue_timeout_s=0.5, batch_reserve=0.3,
        capacity_factor=1.5, default_priority=Priority.BATCH,
    )  # fmt: skip
    assert args.stream_buffer_bytes == 4096


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ("{maxQueue: -1}", "maxQueue"),
        ("{batchReserve: 1.0}", "batchReserve"),
        ("{capacityFactor: 0}", "capacityFactor"),
        ("{defaultPriority: urgent}", "defaultPriority"),
        ("{queueSize: 3}", "queueSize"),
    ],
)
def test_bad_values_are_refused_naming_the_field(section: str, field: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(BASE + f"router:\n  admission: {section}\n")
    assert f"router.admission.{field}" in error.value.message
