"""An `orchestrator up` for the fabric tests, and a steady load that records who served what.

Each request's start time, end time, serving replica (the router's `x-orchestrator-replica`
header) and outcome are kept, so a test can say when a replica stopped and started receiving new
requests, and that none failed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ORCHESTRATOR = [sys.executable, "-m", "orchestrator"]
READY_WITHIN_S = 120.0
REPLICA_HEADER = "x-orchestrator-replica"


# Below the kernel's ephemeral range and above Ray's worker ports (10002-19999): Ray binds many
# ports while `up` starts, after the ports of the config were checked free, so they must not be
# ports Ray could pick.
PORT_RANGE = (20_000, 32_000)


def free_port() -> int:
    while True:
        port = random.randrange(*PORT_RANGE)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


@dataclass
class RunningStack:
    process: subprocess.Popen[str]
    directory: Path
    http: str
    control_plane: str
    banner: list[str]
    exporters: dict[str, str]  # node → scrape URL

    def orchestrator(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*ORCHESTRATOR, *args, "--control-plane", self.control_plane],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def status(self) -> dict[str, Any]:
        result = self.orchestrator("status", "--json")
        assert result.returncode == 0, result.stderr
        parsed: dict[str, Any] = json.loads(result.stdout)
        return parsed


def write_config(directory: Path) -> Path:
    """One site; one MI355X replica and one MI300X replica, each on a simulated node of its own."""
    config = {
        "apiVersion": "orchestrator/v1alpha1",
        "kind": "Orchestrator",
        "sites": {"us": {}},
        "pools": [
            {
                "name": f"us-{g.lower()}",
                "site": "us",
                "generation": g,
                "engine": "sim",
                "replicas": 1,
                "timeScale": 10,
            }
            for g in ("MI355X", "MI300X")
        ],
        "router": {"httpPort": free_port(), "grpcPort": free_port(), "metricsPort": free_port()},
        "controlPlane": {"grpcPort": free_port()},
        "exporters": {"port": 0},  # free ports; the banner names them
    }
    path = directory / "orchestrator.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@contextmanager
def running_stack() -> Iterator[RunningStack]:
    directory = Path(tempfile.mkdtemp(prefix="fab-", dir="/tmp"))  # short: Ray's socket paths
    config = yaml.safe_load(write_config(directory).read_text())
    process = subprocess.Popen(
        [*ORCHESTRATOR, "up", "--config", str(directory / "orchestrator.yaml")],
        stdout=subprocess.PIPE,
        stderr=(directory / "up.log").open("w"),
        text=True,
        env={**os.environ, "RAY_TMPDIR": str(directory / "ray")},
        start_new_session=True,
    )
    try:
        banner = _read_banner(process, directory)
        exporters = {}
        for line in banner:
            if line.strip().startswith("exporter"):
                url, node = line.split()[1], line.split("(node ")[1].split(";")[0]
                exporters[node] = url
        yield RunningStack(
            process=process,
            directory=directory,
            http=f"http://127.0.0.1:{config['router']['httpPort']}",
            control_plane=f"127.0.0.1:{config['controlPlane']['grpcPort']}",
            banner=banner,
            exporters=exporters,
        )
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        shutil.rmtree(directory, ignore_errors=True)


def _read_banner(process: subprocess.Popen[str], directory: Path) -> list[str]:
    lines: list[str] = []
    done = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if "Ctrl-C stops everything" in line:
                break
        done.set()

    threading.Thread(target=read, daemon=True).start()
    if not done.wait(READY_WITHIN_S) or not lines or "Ctrl-C" not in lines[-1]:
        log = (directory / "up.log").read_text()[-3000:]
        raise AssertionError(f"orchestrator up was not ready in {READY_WITHIN_S:g} s:\n{log}")
    return lines


@dataclass(frozen=True)
class Served:
    started_s: float
    ended_s: float
    replica: str
    ok: bool
    detail: str = ""


@dataclass
class SteadyLoad:
    """`workers` clients, each sending one small chat completion after another."""

    url: str
    workers: int = 3
    records: list[Served] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> SteadyLoad:
        for k in range(self.workers):
            thread = threading.Thread(target=self._client, args=(k,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _client(self, k: int) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            body = {
                "model": "openai/gpt-oss-120b",
                "messages": [{"role": "user", "content": f"client {k} request {n}: hello"}],
                "max_tokens": 4,
            }
            request = urllib.request.Request(
                f"{self.url}/v1/chat/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            started = time.monotonic()
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    response.read()
                    served = Served(started, time.monotonic(), response.headers[REPLICA_HEADER]
                                    or "", response.status == 200)  # fmt: skip
            except (urllib.error.URLError, OSError) as error:
                detail = getattr(error, "read", lambda: b"")()
                served = Served(started, time.monotonic(), "", False, f"{error} {detail!r}")
            self.records.append(served)

    def served_by(
        self, replica: str, after_s: float, before_s: float = float("inf")
    ) -> list[Served]:
        """Requests sent in [after_s, before_s) that `replica` served."""
        return [
            r for r in list(self.records)
            if r.replica == replica and after_s <= r.started_s < before_s
        ]  # fmt: skip

    def sent(self, after_s: float, before_s: float = float("inf")) -> list[Served]:
        return [r for r in list(self.records) if after_s <= r.started_s < before_s]

    def failures(self) -> list[Served]:
        return [r for r in list(self.records) if not r.ok]
