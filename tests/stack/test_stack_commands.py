"""The stack commands' failures a user meets first: bad config, taken ports, no control plane."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from orchestrator.config import ConfigError, default_config_text, validate_config

ORCHESTRATOR = [sys.executable, "-m", "orchestrator"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ORCHESTRATOR, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def test_up_with_a_bad_config_names_the_field_exits_2_and_starts_no_ray(tmp_path: Path) -> None:
    config = yaml.safe_load(default_config_text())
    config["pools"][0]["generation"] = "MI999X"
    config["pools"][1]["replicas"] = -1
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    ray_dir = tmp_path / "ray"

    started = time.monotonic()
    result = run("up", "--config", str(path), env={"RAY_TMPDIR": str(ray_dir)})

    assert result.returncode == 2
    assert "pools[0].generation" in result.stderr
    assert "pools[1].replicas" in result.stderr
    assert not ray_dir.exists(), "Ray was started for a bad config"
    assert time.monotonic() - started < 30


def test_up_with_a_taken_port_names_it_exits_2_and_starts_no_ray(tmp_path: Path) -> None:
    http_port, grpc_port, metrics_port = free_ports(3)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = yaml.safe_load(default_config_text())
        config["router"].update(httpPort=http_port, grpcPort=grpc_port, metricsPort=metrics_port)
        config["controlPlane"]["grpcPort"] = taken.getsockname()[1]
        path = tmp_path / "taken.yaml"
        path.write_text(yaml.safe_dump(config))
        ray_dir = tmp_path / "ray"
        result = run("up", "--config", str(path), env={"RAY_TMPDIR": str(ray_dir)})
    assert result.returncode == 2
    assert "controlPlane.grpcPort" in result.stderr
    assert not ray_dir.exists()


@contextmanager
def taken_after_a_free_port() -> Iterator[int]:
    """A listening port p + 1 whose p is free, below the ephemeral range (where no outgoing
    connection's source port, nor the free ports picked above, can take p meanwhile)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for first in random.sample(range(20000, low - 2), 50):
        with socket.socket() as probe, socket.socket() as taken:
            try:
                probe.bind(("127.0.0.1", first))
                taken.bind(("127.0.0.1", first + 1))
            except OSError:
                continue
            probe.close()
            taken.listen()
            yield first + 1
            return
    raise AssertionError(f"no free pair of ports below {low}")


def test_up_with_a_fixed_exporter_port_checks_every_nodes_port(tmp_path: Path) -> None:
    """Node k's exporter takes exporters.port + k: the second node's port being taken is refused
    up front, before Ray starts, naming it."""
    http_port, grpc_port, control_port, metrics_port = free_ports(4)
    with taken_after_a_free_port() as second:
        config = yaml.safe_load(default_config_text())  # two nodes: kr/MI300X, us/MI355X
        config["router"].update(httpPort=http_port, grpcPort=grpc_port, metricsPort=metrics_port)
        config["controlPlane"]["grpcPort"] = control_port
        config["exporters"]["port"] = second - 1
        path = tmp_path / "taken.yaml"
        path.write_text(yaml.safe_dump(config))
        ray_dir = tmp_path / "ray"
        result = run("up", "--config", str(path), env={"RAY_TMPDIR": str(ray_dir)})
    assert result.returncode == 2, result.stderr
    assert f"exporters.port + 1: port {second} on 127.0.0.1 is not free" in result.stderr
    assert "exporters.port: 0" in result.stderr  # the way out
    assert not ray_dir.exists()


def test_exporter_port_0_means_any_and_other_ports_stay_refused() -> None:
    config = yaml.safe_load(default_config_text())
    config["exporters"]["port"] = 0
    assert validate_config(config).exporters.port == 0
    assert validate_config(yaml.safe_load(default_config_text())).exporters.port == 9400
    for bad in (-1, 65536):
        config["exporters"]["port"] = bad
        with pytest.raises(ConfigError, match=r"exporters\.port"):
            validate_config(config)
    config["exporters"]["port"] = 0
    config["router"]["httpPort"] = 0
    with pytest.raises(ConfigError, match=r"router\.httpPort"):
        validate_config(config)


def test_operator_commands_say_the_control_plane_is_unreachable_and_exit_1() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{closed.getsockname()[1]}"
    for args in (["status"], ["scale", "kr-mi300x", "3"], ["drain", "kr-mi300x"]):
        result = run(*args, "--control-plane", address)
        assert result.returncode == 1, result.stderr
        assert f"control plane at {address} is unreachable" in result.stderr
