"""The overload benchmark's child processes: simulated replicas and a router, on loopback, and
a sampler of the router's memory."""

from __future__ import annotations

import contextlib
import math
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.bench.overload.fleet import MODEL, UniformFleet
from orchestrator.bench.processes import child, free_port, orchestrator_argv, wait_http

READY_WITHIN_S = 60.0
RSS_EVERY_S = 0.5


@contextlib.contextmanager
def running_fleet(fleet: UniformFleet) -> Iterator[list[str]]:
    """The simulated replicas as child processes, ready on entry; yields their base URLs."""
    with contextlib.ExitStack() as replicas:
        urls: list[str] = []
        processes: list[subprocess.Popen[bytes]] = []
        for index in range(fleet.replicas):
            port = free_port()
            process = replicas.enter_context(child(orchestrator_argv(
                "sim", "serve", "--generation", fleet.generation.value, "--seed", str(index),
                "--port", str(port), "--time-scale", str(fleet.time_scale),
            )))  # fmt: skip
            urls.append(f"http://127.0.0.1:{port}")
            processes.append(process)
        for url, process in zip(urls, processes, strict=True):
            wait_http(f"{url}/health", READY_WITHIN_S, process=process)
        yield urls


def replicas_file(fleet: UniformFleet, urls: Sequence[str], directory: Path) -> Path:
    lines = ["apiVersion: orchestrator/v1alpha1", "kind: Replicas", f"model: {MODEL}", "replicas:"]
    for index, url in enumerate(urls):
        extra = f", capacityTokensPerS: {fleet.replica_capacity() * fleet.time_scale:.1f}"
        lines.append(
            f'  - {{id: sim-{index}, url: "{url}", pool: pool-{fleet.generation.value.lower()},'
            f" site: lab, generation: {fleet.generation.value}, engine: sim,"
            f" timeScale: {fleet.time_scale}{extra}}}"
        )
    path = directory / "replicas.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@dataclass
class RouterProcess:
    process: subprocess.Popen[bytes]
    url: str

    def rss_mib(self) -> float:
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
        except OSError:
            return math.nan
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return math.nan


@contextlib.contextmanager
def running_router(
    fleet: UniformFleet, urls: Sequence[str], *, admission: bool, extra: Sequence[str] = ()
) -> Iterator[RouterProcess]:
    """`orchestrator router` over `urls` in a child process, ready on entry."""
    with tempfile.TemporaryDirectory(prefix="overload-") as directory:
        config = replicas_file(fleet, urls, Path(directory))
        port = free_port()
        argv = orchestrator_argv(
            "router", "--config", str(config), "--port", str(port), "--grpc-port", "0",
            "--metrics-port", "0",
            "--latency-scale", str(fleet.time_scale), "--admission", "on" if admission else "off",
            *extra,
        )  # fmt: skip
        with child(argv) as process:
            router = RouterProcess(process, f"http://127.0.0.1:{port}")
            wait_http(f"{router.url}/ready", READY_WITHIN_S, process=process)
            yield router


class RssSampler:
    """Samples a process's RSS every `RSS_EVERY_S` in a thread while in use."""

    def __init__(self, router: RouterProcess) -> None:
        self._router = router
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            self.samples.append((time.monotonic() - start, self._router.rss_mib()))
            self._stop.wait(RSS_EVERY_S)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
