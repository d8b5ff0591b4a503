"""A real router (HTTP and gRPC) over real simulated replica processes, for LoadGen tests."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from live_fleet import free_port, started

from orchestrator.core.generations import Generation


@dataclass(frozen=True, slots=True)
class Stack:
    http_url: str
    grpc_target: str
    replica_urls: list[str]


@contextlib.contextmanager
def live_stack(
    generations: Sequence[Generation], workdir: Path, *, time_scale: float
) -> Iterator[Stack]:
    with contextlib.ExitStack() as stack:
        urls = []
        for index, generation in enumerate(generations):
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            argv = [
                sys.executable, "-m", "orchestrator", "sim", "serve", "--generation",
                generation.value, "--port", str(port), "--time-scale", str(time_scale),
                "--seed", str(index),
            ]  # fmt: skip
            stack.enter_context(started(argv, workdir / f"replica-{index}.log", f"{url}/health"))
            urls.append(url)
        entries = "".join(
            f"  - {{id: r{i}-{g.value.lower()}, url: '{u}', pool: {g.value.lower()}, "
            f"site: local, generation: {g.value}, engine: sim, timeScale: {time_scale}}}\n"
            for i, (g, u) in enumerate(zip(generations, urls, strict=True))
        )
        config = workdir / "replicas.yaml"
        config.write_text(
            "apiVersion: orchestrator/v1alpha1\nkind: Replicas\nmodel: openai/gpt-oss-120b\n"
            f"replicas:\n{entries}"
        )
        port, grpc_port = free_port(), free_port()
        router = f"http://127.0.0.1:{port}"
        argv = [
            sys.executable, "-m", "orchestrator", "router", "--config", str(config),
            "--port", str(port), "--grpc-port", str(grpc_port), "--metrics-port", "0",
            "--latency-scale", str(time_scale),
        ]  # fmt: skip
        stack.enter_context(started(argv, workdir / "router.log", f"{router}/ready"))
        yield Stack(router, f"127.0.0.1:{grpc_port}", urls)
