"""`orchestrator exporter` and the in-process server: /metrics over real HTTP on loopback."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from exporter_fixtures import BY_DRIVER

from orchestrator.exporters.server import start_exporter
from orchestrator.exporters.tree import NodeTreeBuilder

REPO = Path(__file__).resolve().parents[2]


def fetch(url: str) -> tuple[str, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.headers.get("Content-Type", ""), response.read().decode()


def test_start_exporter_serves_reads_at_scrape_time_and_stops(tmp_path: Path) -> None:
    tree = NodeTreeBuilder(tmp_path)
    tree.netdev("enp68s0", carrier_changes=2)
    handle = start_exporter(tmp_path, node="us-node-3", site="us", ethtool_dir=tmp_path)
    try:
        content_type, body = fetch(handle.url)
        assert content_type.startswith("text/plain")
        line = 'nic_carrier_changes_total{device="enp68s0",node="us-node-3",site="us"}'
        assert f"{line} 2.0" in body
        tree.netdev("enp68s0", carrier_changes=6)  # a flap between two scrapes
        assert f"{line} 6.0" in fetch(handle.url)[1]
    finally:
        handle.stop()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", handle.port), timeout=2):
        pass
    handle.stop()  # idempotent


def run_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "exporter", *args],
        cwd=REPO,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )


@pytest.mark.slow
def test_cli_serves_a_fixture_node_until_sigterm() -> None:
    fixture = BY_DRIVER["bnxt_re"]
    process = run_cli(
        "--sysfs-root", str(fixture.directory),  # a root holding sys/, like --sysfs-root /
        "--ethtool-dir", str(fixture.directory / "ethtool"),
        "--port", "0", "--node", fixture.node, "--site", fixture.site,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        url = None
        for line in process.stderr:
            found = re.search(r"http://\S+/metrics", line)
            if found:
                url = found.group(0)
                break
        assert url is not None, "the exporter never said where it listens"
        _, body = fetch(url)
        assert 'rdma_port_state{device="bnxt_re1",driver="bnxt_re",node="us-mi355x-node-0"' in body
        assert "nic_pfc_pause_duration_seconds_total{" in body
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_cli_rejects_a_missing_sysfs_root_with_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    process = run_cli("--sysfs-root", str(missing), "--port", "0", "--node", "n", "--site", "s")
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2
    assert f"--sysfs-root {str(missing)!r} is not a directory" in err
    assert "Traceback" not in err


def test_cli_reports_a_port_in_use_without_a_traceback(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = run_cli(
            "--sysfs-root", str(tmp_path), "--port", str(port), "--node", "n", "--site", "s"
        )
        _, err = process.communicate(timeout=30)
    assert process.returncode == 1
    assert f"cannot serve on 127.0.0.1:{port}" in err
    assert "Traceback" not in err
