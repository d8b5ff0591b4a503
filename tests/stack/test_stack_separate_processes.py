"""The stack as the Helm chart runs it: `control-plane` and `router --control-plane --workers 2`
as processes of their own, every worker following the routing table; and `up` stopped while it is
still starting. Each test checks that no process of its Ray cluster (found by the session
directory, kept under a `RAY_TMPDIR` of its own) is left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from orchestrator.config import default_config_text

pytestmark = pytest.mark.slow
ORCHESTRATOR = [sys.executable, "-m", "orchestrator"]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in line and state != "Z":
            found.append(line)
    return found


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A short directory (Ray's socket paths are length-limited) with a config on free ports."""
    directory = Path(tempfile.mkdtemp(prefix="cp-", dir="/tmp"))
    config = yaml.safe_load(default_config_text())
    http, grpc, control, metrics = free_ports(4)
    config["router"].update(httpPort=http, grpcPort=grpc, metricsPort=metrics)
    config["controlPlane"]["grpcPort"] = control
    config["exporters"]["port"] = 0  # free ports, whatever the node count
    (directory / "orchestrator.yaml").write_text(yaml.safe_dump(config))
    try:
        yield directory
    finally:
        deadline = time.monotonic() + 20
        while left := processes_mentioning(str(directory / "ray")):
            if time.monotonic() > deadline:
                for line in left:
                    print(f"left running: {line}")
                pytest.fail(f"{len(left)} Ray processes left running")
            time.sleep(0.2)
        shutil.rmtree(directory, ignore_errors=True)


def start(args: list[str], workdir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*ORCHESTRATOR, *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "RAY_TMPDIR": str(workdir / "ray")},
        start_new_session=True,
    )


def stop(process: subprocess.Popen[str]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise


def routable(url: str) -> int:
    try:
        with urllib.request.urlopen(f"{url}/ready", timeout=2) as response:
            body = response.read()
    except urllib.error.HTTPError as error:
        body = error.read()
    except OSError:
        return 0
    return int(json.loads(body)["routable_replicas"])


def test_router_workers_follow_a_control_plane_process_and_serve_its_replicas(
    workdir: Path,
) -> None:
    config = yaml.safe_load((workdir / "orchestrator.yaml").read_text())
    control_plane_address = f"127.0.0.1:{config['controlPlane']['grpcPort']}"
    http_port = config["router"]["httpPort"]
    url = f"http://127.0.0.1:{http_port}"
    control_plane = start(
        ["control-plane", "--config", str(workdir / "orchestrator.yaml")], workdir
    )
    router = start(
        ["router", "--control-plane", control_plane_address, "--port", str(http_port),
         "--grpc-port", "0", "--metrics-port", "0", "--latency-scale", "10", "--workers", "2"],
        workdir,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        # Each check is a fresh connection, which the kernel gives either worker: 16 in a row
        # seeing every replica means both follow the table (a worker that did not would show
        # up in about half of them).
        while not all(routable(url) == 4 for _ in range(16)):
            assert control_plane.poll() is None, "the control plane exited"
            assert router.poll() is None, "the router exited"
            assert time.monotonic() < deadline, "4 routable replicas not within 90 s"
            time.sleep(0.5)
        request = urllib.request.Request(
            f"{url}/v1/chat/completions",
            data=json.dumps(
                {"model": "openai/gpt-oss-120b", "messages": [{"role": "user", "content": "Hi"}],
                 "max_tokens": 4}
            ).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.loads(response.read())["choices"][0]["message"]["content"]
    finally:
        router_status = stop(router)
        control_plane_status = stop(control_plane)
    assert (router_status, control_plane_status) == (0, 0)


def test_up_stopped_while_starting_stops_what_it_started(workdir: Path) -> None:
    up = start(["up", "--config", str(workdir / "orchestrator.yaml")], workdir)
    deadline = time.monotonic() + 30
    while not processes_mentioning(str(workdir / "ray")):
        assert time.monotonic() < deadline, "Ray did not start within 30 s"
        time.sleep(0.1)
    assert stop(up) in (0, 130)
