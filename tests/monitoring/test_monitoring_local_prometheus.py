"""`LocalPrometheus` and its configuration: targets keep their labels, an alert fires from real
scrapes, a missing binary says how to install it, and stopping leaves no process or directory."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, Replica
from orchestrator.exporters.server import start_exporter
from orchestrator.monitoring.local_prometheus import (
    LocalPrometheus,
    PrometheusError,
    PrometheusUnavailable,
    prometheus_available,
)
from orchestrator.monitoring.rules import render_rules
from orchestrator.monitoring.scrape_config import ScrapeTarget, prometheus_config
from orchestrator.monitoring.targets import ExporterEndpoint, address_of, stack_targets

FIXTURE = Path(__file__).parents[1] / "exporters" / "fixtures" / "mlx5"
needs_prometheus = pytest.mark.skipif(
    not prometheus_available(), reason="/usr/bin/prometheus is not installed"
)


def replica(replica_id: str, url: str, node: str = "") -> Replica:
    return Replica(
        replica_id=replica_id, url=url, model="m", pool="kr-mi300x", site="kr",
        generation=Generation.MI300X, engine=EngineKind.SIM, capacity_prior_tokens_per_s=1.0,
        node=node,
    )  # fmt: skip


def test_stack_targets_label_engines_by_site_generation_pool_replica_and_node() -> None:
    targets = stack_targets(
        routers=["127.0.0.1:8000"],
        replicas=[
            replica("r0", "http://127.0.0.1:8101", node="kr-0"),
            replica("r1", "http://127.0.0.1:8102"),
        ],
        exporters=[ExporterEndpoint("kr-0", "kr", "MI300X", "127.0.0.1:9400")],
    )
    assert [(t.job, t.address) for t in targets] == [
        ("router", "127.0.0.1:8000"),
        ("engine", "127.0.0.1:8101"),
        ("engine", "127.0.0.1:8102"),
        ("exporter", "127.0.0.1:9400"),
    ]
    assert targets[1].labels == {
        "site": "kr", "generation": "MI300X", "pool": "kr-mi300x", "replica": "r0", "node": "kr-0"
    }  # fmt: skip
    assert "node" not in targets[2].labels
    assert targets[3].labels == {"node": "kr-0", "site": "kr", "generation": "MI300X"}


def test_the_config_has_one_job_per_kind_and_keeps_exporter_labels() -> None:
    config = prometheus_config(
        [
            ScrapeTarget("router", "127.0.0.1:8000"),
            ScrapeTarget("exporter", "127.0.0.1:9400", {"node": "a", "site": "kr"}),
            ScrapeTarget("exporter", "127.0.0.1:9401", {"node": "b", "site": "us"}),
        ],
        rule_files=["/tmp/rules.yaml"],
        scrape_interval_s=0.5,
        evaluation_interval_s=2,
    )
    assert config["global"] == {
        "scrape_interval": "500ms", "scrape_timeout": "500ms", "evaluation_interval": "2000ms"
    }  # fmt: skip
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"router", "exporter"}
    assert jobs["exporter"]["honor_labels"] and not jobs["router"]["honor_labels"]
    assert [c["labels"]["node"] for c in jobs["exporter"]["static_configs"]] == ["a", "b"]


@pytest.mark.parametrize(
    ("job", "address", "labels", "message"),
    [
        ("engine", "http://127.0.0.1:80", {}, "host:port"),
        ("engine", "127.0.0.1", {}, "host:port"),
        ("engine", "127.0.0.1:80", {"__name__": "x"}, "label name"),
        ("engine", "127.0.0.1:80", {"bad-label": "x"}, "label name"),
        ("bad job", "127.0.0.1:80", {}, "job"),
    ],
)
def test_a_bad_target_is_refused_with_its_field(
    job: str, address: str, labels: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ScrapeTarget(job, address, labels)


def test_address_of_needs_an_explicit_port() -> None:
    assert address_of("http://127.0.0.1:8101") == "127.0.0.1:8101"
    assert address_of("http://[::1]:8101") == "[::1]:8101"
    with pytest.raises(ValueError, match="host:port"):
        address_of("http://127.0.0.1")


def test_a_missing_binary_says_how_to_install_prometheus(tmp_path: Path) -> None:
    with pytest.raises(PrometheusUnavailable, match="apt-get install prometheus"):
        LocalPrometheus([], binary=tmp_path / "prometheus")


@needs_prometheus
def test_bad_rules_make_start_fail_with_prometheus_own_message() -> None:
    server = LocalPrometheus([], rules="groups: [{name: g, rules: [{record: x, expr: 'sum('}]}]")
    with pytest.raises(PrometheusError, match="exited"), server:
        pass
    assert server.log_path is None


@needs_prometheus
@pytest.mark.slow
def test_an_exporter_that_stops_answering_fires_exporter_down_and_stop_cleans_up() -> None:
    exporter = start_exporter(
        FIXTURE / "sys", node="kr-0", site="kr", ethtool_dir=FIXTURE / "ethtool"
    )
    target = ExporterEndpoint("kr-0", "kr", "MI300X", f"{exporter.host}:{exporter.port}")
    server = LocalPrometheus(
        stack_targets(routers=[], replicas=[], exporters=[target]),
        rules=render_rules(max_for_s=1),
        scrape_interval_s=0.5,
        evaluation_interval_s=0.5,
    )
    try:
        with server:
            pid = server.pid
            workdir = server.log_path.parent if server.log_path else None
            assert until(lambda: server.query('up{job="exporter",node="kr-0"} == 1'))
            assert not any(a["labels"]["alertname"] == "ExporterDown" for a in server.alerts())
            exporter.stop()
            firing = until(
                lambda: [
                    a for a in server.alerts()
                    if a["labels"]["alertname"] == "ExporterDown" and a["state"] == "firing"
                ]
            )  # fmt: skip
            assert firing[0]["labels"]["node"] == "kr-0"
            assert firing[0]["labels"]["severity"] == "warning"
            with pytest.raises(PrometheusError, match="bad_data"):
                server.query("sum(")
    finally:
        exporter.stop()
    assert pid is not None and not Path(f"/proc/{pid}").exists()
    assert workdir is not None and not workdir.exists()


def until(condition, within_s: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.25)
    return condition()
