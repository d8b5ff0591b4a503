"""The fleet `fleet_scale` watches: instant engines, many in one process, serving vLLM-sized
metric pages; the replicas file and the control-plane config over them; and a control plane in
this process (registry, one checker actor per `REPLICAS_PER_SCRAPER` replicas, gRPC server)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from orchestrator.config.loader import parse_config

MODEL = "openai/gpt-oss-120b"
REPLICAS_PER_SCRAPER = 64
_T = TypeVar("_T")


@contextlib.contextmanager
def engines(count: int, workdir: Path, delay_ms: float = 0.0) -> Iterator[list[str]]:
    """`count` instant replicas in one process; yields their base URLs."""
    argv = [sys.executable, "-m", "orchestrator.bench.static_backend", "--count", str(count),
            "--vllm-page", "--model", MODEL, "--delay-ms", str(delay_ms)]  # fmt: skip
    with (workdir / f"engines-{count}.log").open("wb") as log:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log)
    try:
        assert child.stdout is not None
        ports = json.loads(child.stdout.readline())["ports"]
        yield [f"http://127.0.0.1:{port}" for port in ports]
    finally:
        child.terminate()
        child.wait(timeout=10)


def replicas_file(urls: Sequence[str], workdir: Path) -> Path:
    path = workdir / "replicas.yaml"
    rows = "".join(
        f"  - {{id: r{i}, url: '{url}', pool: bench, site: local, generation: MI355X,"
        " engine: vllm}\n"
        for i, url in enumerate(urls)
    )
    path.write_text(f"apiVersion: orchestrator/v1alpha1\nkind: Replicas\nmodel: '{MODEL}'\n"
                    f"replicas:\n{rows}")  # fmt: skip
    return path


def control_plane_config(urls: Sequence[str]) -> str:
    """External pools of `REPLICAS_PER_SCRAPER` endpoints each."""
    pools = ""
    for start in range(0, len(urls), REPLICAS_PER_SCRAPER):
        share = urls[start : start + REPLICAS_PER_SCRAPER]
        pools += (
            f"  - {{name: shard-{start // REPLICAS_PER_SCRAPER}, site: local, generation: MI355X,"
            f" engine: external, endpoints: {json.dumps(list(share))}}}\n"
        )
    return (f"apiVersion: orchestrator/v1alpha1\nkind: Orchestrator\nmodel: {MODEL}\n"
            f"sites:\n  local: {{}}\npools:\n{pools}")  # fmt: skip


class LoopThread:
    """An event loop in a thread of this process: the gRPC control-plane server runs on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


@contextlib.contextmanager
def control_plane(urls: Sequence[str], namespace: str) -> Iterator[tuple[int, dict[str, int]]]:
    """Registry, one checker actor per pool and the gRPC server; yields its port and the pids."""
    import ray

    from orchestrator.controlplane.checker_actor import CheckerShare, ExternalCheckerActor
    from orchestrator.controlplane.grpc_service import start_control_plane_server
    from orchestrator.controlplane.registry import start_registry

    config = parse_config(control_plane_config(urls))
    registry = start_registry(config, name=f"{namespace}-registry", namespace=namespace)
    pids = {"registry": ray.get(registry.__ray_call__.remote(lambda _: os.getpid()))}
    checkers = []
    for index, pool in enumerate(config.pools):
        share = CheckerShare.whole(config.model_copy(update={"pools": (pool,)}))
        checker = ExternalCheckerActor.remote(share, registry)
        pids[f"scraper-{index}"] = ray.get(checker.start.remote())
        checkers.append(checker)
    pids["server"] = os.getpid()
    servers = LoopThread()
    server, port = servers.run(start_control_plane_server(registry))
    try:
        deadline = time.monotonic() + 120
        while len(ray.get(registry.snapshot.remote()).loads) < len(urls):
            if time.monotonic() > deadline:
                raise RuntimeError("the control plane did not list every replica with a load")
            time.sleep(0.5)
        yield port, pids
    finally:
        servers.run(server.stop(grace=None))
        servers.close()
        for checker in checkers:
            ray.kill(checker)
        ray.kill(registry, no_restart=True)
