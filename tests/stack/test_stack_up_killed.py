"""`kill -9` of `orchestrator up` leaves nothing running: its watchdog stops what `up` started.

A small stack (one replica) keeps it quick: what matters is that Ray's GCS, raylets, a replica's
worker and the router are all running when `up` is killed outright, and none is once it is gone.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml
from test_stack_up import alive, cmdline, descendants, free_ports, processes_mentioning

from orchestrator.config import default_config_text

pytestmark = pytest.mark.slow
READY_WITHIN_S = 90.0
GONE_WITHIN_S = 20.0


def small_config(directory: Path) -> Path:
    """The built-in config on free ports, with one kr replica and none in us (its node still
    starts, so every kind of Ray process is there)."""
    config = yaml.safe_load(default_config_text())
    http, grpc, control, metrics = free_ports(4)
    config["router"].update(httpPort=http, grpcPort=grpc, metricsPort=metrics)
    config["controlPlane"]["grpcPort"] = control
    config["exporters"]["port"] = 0  # free ports, whatever the node count
    config["pools"][0]["replicas"] = 1
    config["pools"][1]["replicas"] = 0
    path = directory / "orchestrator.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_kill_9_of_up_leaves_no_process_it_started_running() -> None:
    directory = Path(tempfile.mkdtemp(prefix="up9-", dir="/tmp"))  # short: Ray's socket paths
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "up", "--config", str(small_config(directory))],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "RAY_TMPDIR": str(directory / "ray")},
        start_new_session=True,
    )
    seen: dict[int, str] = {}
    try:
        banner: list[str] = []
        stdout = process.stdout
        assert stdout is not None
        threading.Thread(target=lambda: banner.extend(stdout), daemon=True).start()
        deadline = time.monotonic() + READY_WITHIN_S
        while not any("orchestrator is up" in line for line in banner):
            assert process.poll() is None, f"up exited with {process.returncode}"
            assert time.monotonic() < deadline, "no ready banner within 90 s"
            time.sleep(0.2)
        (session,) = [line.split()[-1] for line in banner if "Ray session" in line]
        seen = {pid: cmdline(pid) for pid in descendants(process.pid)}
        kinds = " ".join(seen.values())
        assert "raylet" in kinds and "gcs_server" in kinds and "router" in kinds
        assert "ReplicaActor" in kinds or "ray::" in kinds

        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        deadline = time.monotonic() + GONE_WITHIN_S
        while left := [
            f"{pid} {line}" for pid, line in seen.items() if alive(pid) and cmdline(pid) == line
        ] + processes_mentioning(session):
            assert time.monotonic() < deadline, f"left running after kill -9 of up: {left}"
            time.sleep(0.2)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid, line in seen.items():  # should the watchdog have failed: leave the machine clean
            if alive(pid) and cmdline(pid) == line:
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(directory, ignore_errors=True)
