"""`orchestrator router` refuses bad configuration with exit status 2 and a message naming the
field, and serves from several worker processes that share one port."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from replica_server import ReplicaThread
from router_harness import MODEL, ReplicaEntry, get_status, replicas_document, wait_until

from orchestrator.cli import main

STARTUP_S = 30.0


@pytest.fixture
def replicas_file(tmp_path: Path, instant_pair: tuple[ReplicaThread, ReplicaThread]) -> Path:
    fast, slow = instant_pair
    path = tmp_path / "replicas.yaml"
    path.write_text(
        replicas_document(
            [ReplicaEntry("a", fast.url, "MI355X"), ReplicaEntry("b", slow.url, "MI300X")]
        )
    )
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        status = main(["router", *argv])
    except SystemExit as exit_:  # argparse refuses bad values itself
        status = int(exit_.code or 0)
    return status, capsys.readouterr().err


@pytest.mark.parametrize(
    ("document", "named"),
    [
        ("apiVersion: orchestrator/v1alpha1\nkind: Replicas\nmodel: m\nreplicas:\n"
         "  - {id: a, pool: p, site: s, generation: MI355X}\n", "replicas.0.url"),
        ("apiVersion: orchestrator/v1alpha1\nkind: Replicas\nmodel: m\nreplicas:\n"
         "  - {id: a, url: 'http://h:1', pool: p, site: s, generation: H100}\n", "H100"),
        ("apiVersion: orchestrator/v1alpha1\nkind: Replicas\nmodel: m\nreplicas: []\nextra: 1\n",
         "extra"),
        ("{not yaml: [", "not YAML"),
        ("apiVersion: orchestrator/v1alpha1\nkind: Replicas\nmodel: m\nreplicas:\n"
         "  - {id: a, url: 'http://h:1', pool: p, site: s, generation: MI355X, site: t}\n",
         "replicas[0].site: found duplicate key 'site'"),
    ],
    ids=["missing-url", "unknown-generation", "unknown-key", "not-yaml", "duplicate-key"],
)  # fmt: skip
def test_a_bad_replicas_file_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: str, named: str
) -> None:
    path = tmp_path / "replicas.yaml"
    path.write_text(document)

    status, err = run_cli(capsys, "--config", str(path))

    assert status == 2
    assert named in err and str(path) in err


def test_a_missing_file_an_unknown_profile_or_keyless_keys_file_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], replicas_file: Path
) -> None:
    empty_keys = tmp_path / "keys.txt"
    empty_keys.write_text("# nothing here\n\n")

    missing = run_cli(capsys, "--config", str(tmp_path / "absent.yaml"))
    profile = run_cli(capsys, "--config", str(replicas_file), "--profile", "fastest")
    keys = run_cli(capsys, "--config", str(replicas_file), "--api-keys-file", str(empty_keys))
    workers = run_cli(capsys, "--config", str(replicas_file), "--workers", "0")
    scale = run_cli(capsys, "--config", str(replicas_file), "--latency-scale", "-1")

    assert missing[0] == 2 and "absent.yaml" in missing[1]
    assert profile[0] == 2 and "fastest" in profile[1] and "capacity" in profile[1]
    assert keys[0] == 2 and "no keys" in keys[1]
    assert workers[0] == 2 and "--workers" in workers[1]
    assert scale[0] == 2 and "--latency-scale" in scale[1]


def test_a_port_already_taken_exits_2_naming_it(replicas_file: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator", "router", "--config", str(replicas_file),
             "--port", str(port), "--metrics-port", "0"],
            capture_output=True, text=True, timeout=STARTUP_S,
        )  # fmt: skip

    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


def listening_sockets(port: int) -> int:
    """Sockets in LISTEN state on `port` (Linux /proc/net/tcp)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if int(local.split(":")[1], 16) == port and state == "0A":
            count += 1
    return count


@pytest.fixture
def two_worker_router(replicas_file: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    process = subprocess.Popen(
        [
            sys.executable, "-m", "orchestrator", "--log-level", "WARNING", "router",
            "--config", str(replicas_file), "--port", "0", "--workers", "2", "--metrics-port", "0",
        ],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert found, f"no address announced: {line!r}"
        yield process, found.group(0)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@pytest.mark.timeout(90)
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc/net/tcp")
def test_two_workers_share_the_port_serve_requests_and_stop_on_sigterm(
    two_worker_router: tuple[subprocess.Popen[str], str],
) -> None:
    process, url = two_worker_router
    port = int(url.rsplit(":", 1)[1])
    assert wait_until(lambda: listening_sockets(port) == 2, STARTUP_S, 0.1)
    assert wait_until(lambda: get_status(f"{url}/ready") == 200, STARTUP_S, 0.1)

    body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 3}).encode()
    for _ in range(20):  # a fresh connection each: the kernel spreads them over the workers
        request = urllib.request.Request(
            f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.loads(response.read())["usage"]["completion_tokens"] == 3

    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    assert time.monotonic() - started < 15
    assert listening_sockets(port) == 0
