"""Engines found through HTTP service discovery: the target groups the control plane serves carry
the static targets' labels, and a Prometheus config with a discovered job is one `promtool
check config` accepts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from orchestrator.controlplane.sd_targets import engine_target_groups
from orchestrator.core.generations import Generation
from orchestrator.core.records import EngineKind, Replica
from orchestrator.monitoring.scrape_config import DiscoveredJob, ScrapeTarget, prometheus_config
from orchestrator.monitoring.targets import ENGINE_JOB, stack_targets

PROMTOOL = shutil.which("promtool")


def replica(replica_id: str, url: str, node: str = "") -> Replica:
    return Replica(
        replica_id=replica_id,
        url=url,
        model="openai/gpt-oss-120b",
        pool="us-mi355x",
        site="us",
        generation=Generation.MI355X,
        engine=EngineKind.VLLM,
        capacity_prior_tokens_per_s=1000.0,
        node=node,
    )


def test_target_groups_carry_the_labels_the_static_targets_give() -> None:
    placed = replica("r-2", "http://10.0.0.7:8123", node="ray-node-abc")
    external = replica("r-1", "https://vllm.example:8443")
    groups = engine_target_groups([placed, external], {"ray-node-abc": "us-mi355x"})
    targets = stack_targets(routers=[], replicas=[placed, external], exporters=[])
    static = {t.labels["replica"]: t for t in targets}
    assert groups == [
        {
            "targets": ["vllm.example:8443"],
            "labels": {**static["r-1"].labels, "__scheme__": "https"},
        },
        {"targets": ["10.0.0.7:8123"], "labels": {**static["r-2"].labels, "node": "us-mi355x"}},
    ]
    assert static["r-2"].labels["node"] == "ray-node-abc"  # unnamed, the Ray node id is used
    assert engine_target_groups([placed], {})[0]["labels"]["node"] == "ray-node-abc"
    # No explicit port: the scheme's default; IPv6 hosts bracketed.
    assert engine_target_groups([replica("r", "http://[::1]")], {})[0]["targets"] == ["[::1]:80"]


def test_a_job_cannot_be_both_static_and_discovered_and_bad_jobs_are_refused() -> None:
    with pytest.raises(ValueError, match="static targets and service discovery"):
        prometheus_config(
            [ScrapeTarget(ENGINE_JOB, "127.0.0.1:8000")],
            rule_files=[],
            scrape_interval_s=1,
            evaluation_interval_s=1,
            discovered=[DiscoveredJob(ENGINE_JOB, "http://127.0.0.1:1/sd/engines")],
        )
    with pytest.raises(ValueError, match="expected http"):
        DiscoveredJob(ENGINE_JOB, "127.0.0.1:1/sd/engines")
    with pytest.raises(ValueError, match="refresh_s"):
        DiscoveredJob(ENGINE_JOB, "http://127.0.0.1:1/sd/engines", refresh_s=0)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")
def test_promtool_accepts_a_config_with_discovered_engines_plain_and_over_mutual_tls(
    tmp_path: Path,
) -> None:
    tls = {  # --syntax-only: promtool does not read the files
        "ca_file": str(tmp_path / "ca.pem"),
        "cert_file": str(tmp_path / "client.pem"),
        "key_file": str(tmp_path / "client.key"),
    }
    config = prometheus_config(
        [ScrapeTarget("router", "127.0.0.1:8000")],
        rule_files=[],
        scrape_interval_s=1,
        evaluation_interval_s=1,
        discovered=[
            DiscoveredJob(ENGINE_JOB, "http://127.0.0.1:50053/sd/engines", refresh_s=2),
            DiscoveredJob("engine_tls", "https://cp.example:50053/sd/engines", tls=tls),
        ],
    )
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    assert PROMTOOL is not None
    result = subprocess.run(
        [PROMTOOL, "check", "config", "--syntax-only", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    discovered = {job["job_name"]: job for job in config["scrape_configs"]}
    assert discovered[ENGINE_JOB]["http_sd_configs"] == [
        {"url": "http://127.0.0.1:50053/sd/engines", "refresh_interval": "2000ms"}
    ]
    assert discovered["engine_tls"]["http_sd_configs"][0]["tls_config"] == tls
