"""The built-in config: two sites, two simulated pools, four replicas, validated like any file."""

from __future__ import annotations

from pathlib import Path

from orchestrator.config import default_config, default_config_text, load_config
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind


def test_the_default_config_has_two_sites_two_pools_and_four_replicas() -> None:
    config = default_config()
    assert set(config.sites) == {"kr", "us"}
    assert [p.name for p in config.pools] == ["kr-mi300x", "us-mi355x"]
    assert sum(p.replicas or 0 for p in config.pools) == 4


def test_the_default_pools_are_simulated_mi300x_in_kr_and_mi355x_in_us_at_time_scale_10() -> None:
    kr, us = default_config().pools
    assert (kr.site, kr.generation, kr.engine, kr.replicas) == (
        "kr",
        Generation.MI300X,
        EngineKind.SIM,
        2,
    )
    assert (us.site, us.generation, us.engine, us.replicas) == (
        "us",
        Generation.MI355X,
        EngineKind.SIM,
        2,
    )
    assert kr.time_scale == us.time_scale == 10


def test_the_default_sites_are_150_ms_apart_and_the_router_uses_the_capacity_profile() -> None:
    config = default_config()
    assert config.rtt_ms("kr", "us") == config.rtt_ms("us", "kr") == 150
    assert config.router.profile == "capacity"
    assert config.router.latency_scale == 10
    assert (config.router.http_port, config.router.grpc_port) == (8000, 50051)


def test_the_default_text_is_a_starting_point_a_user_can_copy(tmp_path: Path) -> None:
    copied = tmp_path / "orchestrator.yaml"
    copied.write_text(default_config_text())
    assert load_config(copied) == default_config()
