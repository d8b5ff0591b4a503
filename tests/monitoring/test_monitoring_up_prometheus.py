"""`orchestrator up --prometheus` as a user runs it: the embedded stack (Ray, control plane, the
built-in pools, router, simulated fabric with one exporter per node) plus a local Prometheus that
scrapes every one of those processes. Under some traffic every dashboard panel's query and every
recording rule returns data; SIGTERM stops Prometheus with the rest."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from dashboard_queries import panel_queries

from orchestrator.config import default_config_text
from orchestrator.monitoring.local_prometheus import prometheus_available
from orchestrator.monitoring.rules import all_rules

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not prometheus_available(),
        reason="/usr/bin/prometheus is not installed (apt-get install prometheus)",
    ),
]
ORCHESTRATOR = [sys.executable, "-m", "orchestrator"]
READY_WITHIN_S = 150.0
DATA_WITHIN_S = 60.0
MODEL = "openai/gpt-oss-120b"


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class UpStack:
    process: subprocess.Popen[str]
    http: str
    prometheus: str = ""
    lines: list[str] = field(default_factory=list)

    def read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def query(self, expr: str) -> list[dict[str, Any]]:
        return api(self.prometheus, "query?" + urllib.parse.urlencode({"query": expr}))["result"]  # type: ignore[no-any-return]


def api(base: str, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base}/api/v1/{path}", timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    data: dict[str, Any] = body["data"]
    return data


def chat(http: str, max_tokens: int) -> int:
    body = json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Hello!"}],
            "max_tokens": max_tokens,
            "stream": True,
        }
    ).encode()
    request = urllib.request.Request(
        f"{http}/v1/chat/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        response.read()
        return int(response.status)


def until(condition: Callable[[], Any], within_s: float, what: str) -> Any:
    deadline = time.monotonic() + within_s
    while True:
        result = condition()
        if result:
            return result
        assert time.monotonic() < deadline, f"not within {within_s:g} s: {what}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def up() -> Iterator[UpStack]:
    directory = Path(tempfile.mkdtemp(prefix="upm-", dir="/tmp"))  # short: Ray's socket paths
    config = yaml.safe_load(default_config_text())
    http, grpc, control, metrics = free_ports(4)
    config["router"].update(httpPort=http, grpcPort=grpc, metricsPort=metrics)
    config["controlPlane"]["grpcPort"] = control
    config["exporters"]["port"] = 0  # each exporter binds a free port; the banner says which
    (directory / "orchestrator.yaml").write_text(yaml.safe_dump(config))
    process = subprocess.Popen(
        [
            *ORCHESTRATOR,
            "up",
            "--config",
            str(directory / "orchestrator.yaml"),
            "--prometheus",
            "--prometheus-port",
            "0",  # picked when Prometheus starts: Ray, starting first, takes ports at random
            "--prometheus-max-for",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        text=True,
        env={**os.environ, "RAY_TMPDIR": str(directory / "ray")},
        start_new_session=True,
    )
    stack = UpStack(process, f"http://127.0.0.1:{http}")
    reader = threading.Thread(target=stack.read_stdout, daemon=True)
    reader.start()
    try:
        until(
            lambda: process.poll() is not None or any("Ctrl-C" in line for line in stack.lines),
            READY_WITHIN_S,
            "orchestrator up --prometheus ready",
        )
        assert process.poll() is None, f"up exited with {process.returncode}: {stack.lines}"
        stack.prometheus = next(
            line.split()[1] for line in stack.lines if line.split()[:1] == ["prometheus"]
        )
        yield stack
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        shutil.rmtree(directory, ignore_errors=True)


def test_the_banner_names_prometheus_and_every_stack_process_is_a_healthy_target(
    up: UpStack,
) -> None:
    assert up.prometheus.startswith("http://127.0.0.1:"), up.lines
    exporter_urls = [line.split()[1] for line in up.lines if line.split()[:1] == ["exporter"]]
    assert exporter_urls, "the banner lists no exporters"

    def healthy() -> list[dict[str, Any]]:
        targets: list[dict[str, Any]] = api(up.prometheus, "targets?state=active")["activeTargets"]
        return targets if targets and all(t["health"] == "up" for t in targets) else []

    targets = until(healthy, DATA_WITHIN_S, "every target up")
    by_job: dict[str, list[dict[str, Any]]] = {}
    for target in targets:
        by_job.setdefault(target["labels"]["job"], []).append(target)
    assert len(by_job["router"]) == 1
    assert len(by_job["engine"]) == 4  # the built-in pools: 2 x MI300X in kr, 2 x MI355X in us
    assert sorted(t["scrapeUrl"] for t in by_job["exporter"]) == sorted(exporter_urls)
    engine_nodes = {t["labels"]["node"] for t in by_job["engine"]}
    assert engine_nodes <= {t["labels"]["node"] for t in by_job["exporter"]}
    assert {t["labels"]["generation"] for t in by_job["engine"]} == {"MI300X", "MI355X"}
    # Engines come from the control plane's HTTP service discovery, so later replicas are found.
    sd_urls = {t["discoveredLabels"].get("__meta_url") for t in by_job["engine"]}
    assert len(sd_urls) == 1 and str(sd_urls.pop()).endswith("/sd/engines")


def test_under_traffic_every_dashboard_query_and_recording_rule_returns_data(
    up: UpStack,
) -> None:
    stopping = threading.Event()
    statuses: list[int] = []

    def load(seed: int) -> None:
        count = 0
        while not stopping.is_set():
            statuses.append(chat(up.http, 4 + (seed + count) % 8))
            count += 1
            stopping.wait(0.2)

    workers = [threading.Thread(target=load, args=(i,)) for i in range(2)]
    for worker in workers:
        worker.start()
    try:
        queries = {str(q): q.expr for q in panel_queries()}
        queries.update({rule.name: rule.name for rule in all_rules() if not rule.is_alert})
        pending = list(queries)
        deadline = time.monotonic() + DATA_WITHIN_S
        while pending and time.monotonic() < deadline:
            pending = [label for label in pending if not has_a_number(up.query(queries[label]))]
            if pending:
                time.sleep(1.0)
    finally:
        stopping.set()
        for worker in workers:
            worker.join(timeout=120)
    assert pending == [], "queries without data"
    assert statuses and set(statuses) == {200}
    rules = [rule for group in api(up.prometheus, "rules")["groups"] for rule in group["rules"]]
    assert len(rules) == len(all_rules())
    assert [r["name"] for r in rules if r["health"] == "err"] == []


def test_sigterm_stops_prometheus_with_the_stack(up: UpStack) -> None:
    up.process.send_signal(signal.SIGTERM)
    assert up.process.wait(60) == 0
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{up.prometheus}/-/ready", timeout=2)


def has_a_number(series: list[dict[str, Any]]) -> bool:
    return any(not math.isnan(float(s["value"][1])) for s in series)


def test_a_taken_prometheus_port_fails_before_ray_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = yaml.safe_load(default_config_text())
        http, grpc, control, metrics = free_ports(4)
        config["router"].update(httpPort=http, grpcPort=grpc, metricsPort=metrics)
        config["controlPlane"]["grpcPort"] = control
        config["exporters"]["port"] = 0
        (tmp_path / "orchestrator.yaml").write_text(yaml.safe_dump(config))
        result = subprocess.run(
            [
                *ORCHESTRATOR,
                "up",
                "--config",
                str(tmp_path / "orchestrator.yaml"),
                "--prometheus",
                "--prometheus-port",
                str(taken.getsockname()[1]),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "RAY_TMPDIR": str(tmp_path / "ray")},
        )
    assert result.returncode == 2, result.stderr
    assert "--prometheus-port" in result.stderr and "not free" in result.stderr
    assert not (tmp_path / "ray").exists(), "Ray was started"
