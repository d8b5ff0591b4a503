"""Live fleets for end-to-end tests: simulated replicas and a router as real processes."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from orchestrator.core.generations import Generation

READY_WITHIN_S = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_WITHIN_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited early:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as response:
            if response.status == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready in {READY_WITHIN_S:.0f}s:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def started(argv: Sequence[str], log: Path, ready_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """Run a process until the block ends; always stopped (and killed if it lingers)."""
    with log.open("wb") as sink:
        child = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_ready(ready_url, child, log)
        yield child
    finally:
        child.terminate()
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=15)


@dataclass(frozen=True, slots=True)
class LiveReplica:
    replica_id: str
    generation: Generation
    url: str


def metric_sum(url: str, name: str, **labels: str) -> float:
    """Sum of a metric's samples on `url`/metrics, optionally filtered by labels."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        text = response.read().decode()
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


@contextlib.contextmanager
def live_fleet(
    generations: Sequence[Generation],
    workdir: Path,
    *,
    time_scale: float,
    profile: str = "capacity",
    prior_tokens_per_s: float | None = None,
    router_args: Sequence[str] = (),
) -> Iterator[tuple[str, list[LiveReplica]]]:
    """Replicas (one process each) behind one router; yields the router URL and the replicas."""
    with contextlib.ExitStack() as stack:
        replicas = []
        for index, generation in enumerate(generations):
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            argv = [
                sys.executable, "-m", "orchestrator", "sim", "serve",
                "--generation", generation.value, "--port", str(port),
                "--time-scale", str(time_scale), "--seed", str(index),
            ]  # fmt: skip
            stack.enter_context(started(argv, workdir / f"replica-{index}.log", f"{url}/health"))
            replicas.append(LiveReplica(f"r{index}-{generation.value.lower()}", generation, url))
        override = (
            "" if prior_tokens_per_s is None else f", capacityTokensPerS: {prior_tokens_per_s}"
        )
        entries = "".join(
            f"  - {{id: {r.replica_id}, url: '{r.url}', pool: {r.generation.value.lower()}, "
            f"site: local, generation: {r.generation.value}, engine: sim, "
            f"timeScale: {time_scale}{override}}}\n"
            for r in replicas
        )
        config = workdir / "replicas.yaml"
        config.write_text(
            "apiVersion: orchestrator/v1alpha1\nkind: Replicas\nmodel: openai/gpt-oss-120b\n"
            f"replicas:\n{entries}"
        )
        port = free_port()
        router = f"http://127.0.0.1:{port}"
        argv = [
            sys.executable, "-m", "orchestrator", "router", "--config", str(config),
            "--port", str(port), "--metrics-port", "0", "--profile", profile,
            "--latency-scale", str(time_scale), *router_args,
        ]  # fmt: skip
        stack.enter_context(started(argv, workdir / "router.log", f"{router}/ready"))
        yield router, replicas
