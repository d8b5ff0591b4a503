"""What a router costs: req/s, relayed stream chunks/s and added latency, side by side.

    python -m orchestrator.bench.router_overhead [--duration 10] [--runs 3] [--routers ...]

In one run, against the same two instant backends (`static_backend`), it measures going to a
backend directly; through this project's router as one worker over plaintext (`ours`), as one
worker over TLS (`ours-tls`, a self-signed certificate made with `openssl`), and as `--workers`
workers following a control plane whose external pool lists the backends (`ours-cp`, as the Helm
chart runs it); and through `sglang-router` and `vllm-router` (both from PyPI):
non-streaming req/s at 32 concurrent requests, streamed chunks/s at 32 concurrent streams,
latency at concurrency 1 (p50/p99) and, for streams, time to the first byte; and, as figures
the machine's other load changes least, each router's CPU time (user + system, all its
processes and threads) per non-streamed request at 32 connections, and the 1-minute load
average when that run began. With `--runs N` every target is measured N times, interleaved,
and the table shows medians and, in brackets, the spread (max - min) over the runs. Load comes
from `wrk` (Debian's package; the bench says how to install it when missing). Every process it
starts runs on loopback and is stopped at the end. The backends serve the model under a local
tokenizer directory so that neither peer router tries to download one.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.bench.peers import write_tokenizer
from orchestrator.bench.process_probes import session_cpu_seconds
from orchestrator.bench.processes import child, free_port, wait_http
from orchestrator.bench.wrk import first_byte_ms, run_wrk, wrk_script
from orchestrator.core.arg_types import positive_int, seconds


@dataclass(frozen=True, slots=True)
class Measurement:
    name: str
    requests_per_s: float
    chunks_per_s: float
    p50_ms: float
    p99_ms: float
    ttfb_p50_ms: float
    cpu_us_per_request: float
    load_1m: float


@dataclass(frozen=True, slots=True)
class Setting:
    duration_s: float
    connections: int
    stream_chunks: int
    workers: int
    workdir: Path

    @property
    def certificate(self) -> Path:
        return self.workdir / "tls.crt"

    @property
    def key(self) -> Path:
        return self.workdir / "tls.key"

    def client_tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.certificate))
        return context


def measure(
    name: str,
    url: str,
    model: str,
    setting: Setting,
    tls: ssl.SSLContext | None = None,
    session: int | None = None,
) -> Measurement:
    """`session`: the router's session id (its processes' CPU is counted), None for direct."""
    plain = wrk_script(setting.workdir / "plain.lua", model, stream=False)
    streamed = wrk_script(setting.workdir / "stream.lua", model, stream=True)
    completions = f"{url}/v1/completions"
    run_wrk(completions, plain, setting.connections, 1)  # warm connection pools and caches
    load_1m = os.getloadavg()[0]
    cpu_before_s = session_cpu_seconds(session) if session is not None else 0.0
    rate, _ = run_wrk(completions, plain, setting.connections, setting.duration_s)
    cpu_us = float("nan")
    if session is not None and rate > 0:
        used_s = session_cpu_seconds(session) - cpu_before_s
        cpu_us = used_s / (rate * setting.duration_s) * 1e6
    stream_rate, _ = run_wrk(completions, streamed, setting.connections, setting.duration_s)
    _, latency = run_wrk(completions, plain, 1, setting.duration_s)
    return Measurement(
        name=name,
        requests_per_s=rate,
        chunks_per_s=stream_rate * (setting.stream_chunks + 1),
        p50_ms=latency.get(50, float("nan")),
        p99_ms=latency.get(99, float("nan")),
        ttfb_p50_ms=first_byte_ms(url, model, 200, tls),
        cpu_us_per_request=cpu_us,
        load_1m=load_1m,
    )


def make_certificate(setting: Setting) -> None:
    """A self-signed certificate for 127.0.0.1, for `ours-tls` (and the client that trusts it)."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(setting.key), "-out", str(setting.certificate)],
        check=True, capture_output=True,
    )  # fmt: skip


def control_plane_config(backends: Sequence[str], model: str, port: int, setting: Setting) -> Path:
    """An orchestrator config whose one external pool is the backends, on a free gRPC port."""
    config = setting.workdir / "orchestrator.yaml"
    endpoints = ", ".join(f'"{url}"' for url in backends)
    config.write_text(
        f"apiVersion: orchestrator/v1alpha1\nkind: Orchestrator\nmodel: '{model}'\n"
        "sites: {local: {}}\n"
        "pools:\n"
        "  - {name: static, site: local, generation: MI355X, engine: external,"
        f" endpoints: [{endpoints}]}}\n"
        f"controlPlane: {{grpcPort: {port}}}\n"
        "exporters: {port: 0}\n"
    )
    return config


def router_commands(
    backends: Sequence[str], model: str, port: int, setting: Setting, control_plane: str
) -> dict[str, list[str]]:
    python = sys.executable
    replicas = setting.workdir / "replicas.yaml"
    entries = "".join(
        f"  - {{id: static-{i}, url: '{url}', pool: static, site: local, generation: MI355X}}\n"
        for i, url in enumerate(backends)
    )
    replicas.write_text(
        f"apiVersion: orchestrator/v1alpha1\nkind: Replicas\nmodel: '{model}'\nreplicas:\n{entries}"
    )
    ours = [python, "-m", "orchestrator", "router", "--host", "127.0.0.1", "--port", str(port),
            "--grpc-port", "0", "--metrics-port", "0"]  # fmt: skip
    tls = ["--tls-cert", str(setting.certificate), "--tls-key", str(setting.key)]
    return {
        "ours": [*ours, "--config", str(replicas)],
        "ours-tls": [*ours, "--config", str(replicas), *tls],
        "ours-cp": [*ours, "--control-plane", control_plane, "--workers", str(setting.workers)],
        "sglang-router": [
            python, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
            "--port", str(port), "--worker-urls", *backends, "--policy", "round_robin",
            "--log-level", "warn", "--prometheus-port", str(free_port()),
        ],
        "vllm-router": [
            python, "-m", "vllm_router.launch_router", "--host", "127.0.0.1",
            "--port", str(port), "--worker-urls", *backends, "--policy", "round_robin",
            "--prometheus-port", str(free_port()),
        ],
    }  # fmt: skip


def ready_path(name: str) -> str:
    return "/ready" if name.startswith("ours") else "/health"


def routes_both(body: bytes) -> bool:
    """`/ready` of ours: both backends routable (a control plane's table has them both)."""
    return bool(json.loads(body).get("routable_replicas", 0) >= 2)


def run(routers: Sequence[str], setting: Setting, runs: int = 1) -> list[list[Measurement]]:
    """Each run measures every router once, in order; returns the runs' measurements."""
    model = write_tokenizer(setting.workdir / "gpt-oss-120b")
    make_certificate(setting)
    measured: list[list[Measurement]] = []
    with contextlib.ExitStack() as stack:
        backends = []
        for index in range(2):
            port = free_port()
            stack.enter_context(
                child(
                    [sys.executable, "-m", "orchestrator.bench.static_backend", "--port",
                     str(port), "--model", model, "--stream-chunks", str(setting.stream_chunks)],
                    log=setting.workdir / f"backend-{index}.log",
                )
            )  # fmt: skip
            backends.append(f"http://127.0.0.1:{port}")
        for url in backends:
            wait_http(f"{url}/health", 30)
        control_plane = ""
        if "ours-cp" in routers:
            control_plane = start_control_plane(stack, backends, model, setting)
        for run_index in range(runs):
            results = []
            for name in routers:
                print(f"run {run_index + 1}/{runs}: measuring {name} ...", file=sys.stderr,
                      flush=True)  # fmt: skip
                if name == "direct":
                    results.append(measure("direct", backends[0], model, setting))
                    continue
                results.append(measure_router(name, backends, model, setting, control_plane))
            measured.append(results)
    return measured


def start_control_plane(
    stack: contextlib.ExitStack, backends: Sequence[str], model: str, setting: Setting
) -> str:
    """`orchestrator control-plane` over the backends (a local Ray cluster of its own)."""
    port = free_port()
    config = control_plane_config(backends, model, port, setting)
    ray_dir = Path(tempfile.mkdtemp(prefix="rb-", dir="/tmp"))  # Ray's socket paths are short
    stack.callback(shutil.rmtree, ray_dir, ignore_errors=True)
    stack.enter_context(
        child(
            [sys.executable, "-m", "orchestrator", "control-plane", "--config", str(config)],
            log=setting.workdir / "control-plane.log",
            env={**os.environ, "RAY_TMPDIR": str(ray_dir)},
            stop_wait_s=60,
        )
    )
    return f"127.0.0.1:{port}"


def measure_router(
    name: str, backends: Sequence[str], model: str, setting: Setting, control_plane: str
) -> Measurement:
    port = free_port()
    command = router_commands(backends, model, port, setting, control_plane)[name]
    tls = setting.client_tls() if name == "ours-tls" else None
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    log = setting.workdir / f"{name}.log"
    accept = routes_both if name.startswith("ours") else (lambda _: True)
    with child(command, log=log) as process:
        try:
            wait_http(url + ready_path(name), 180, accept, tls)
        except RuntimeError as error:
            raise RuntimeError(f"{error}\n{name}'s log:\n{log.read_text()[-3000:]}") from None
        time.sleep(1.0)  # let health checks mark every backend ready
        label = f"ours-cp-{setting.workers}w" if name == "ours-cp" else name
        return measure(label, url, model, setting, tls, session=process.pid)


def medians(runs: Sequence[Sequence[Measurement]]) -> tuple[list[Measurement], list[Measurement]]:
    """Per target: the median of each figure over the runs, and its spread (max - min)."""
    middle, spread = [], []
    for same in zip(*runs, strict=True):
        figures = {f: [getattr(m, f) for m in same] for f in Measurement.__slots__ if f != "name"}
        middle.append(
            Measurement(same[0].name, **{f: statistics.median(v) for f, v in figures.items()})
        )
        spread.append(Measurement(same[0].name, **{f: max(v) - min(v) for f, v in figures.items()}))
    return middle, spread


def format_table(results: Sequence[Measurement], spread: Sequence[Measurement] = ()) -> str:
    """One row per target; with `spread`, each figure is followed by its spread in brackets."""
    direct = next((r for r in results if r.name == "direct"), None)
    noise = {m.name: m for m in spread}
    header = (
        f"{'target':<14}{'req/s @32':>16}{'chunks/s @32':>20}{'p50 ms @1':>14}{'p99 ms @1':>14}"
        f"{'added p50':>11}{'added p99':>11}{'TTFB ms':>14}{'added TTFB':>12}"
        f"{'CPU us/req':>16}{'load 1m':>13}"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        added = (
            (r.p50_ms - direct.p50_ms, r.p99_ms - direct.p99_ms, r.ttfb_p50_ms - direct.ttfb_p50_ms)
            if direct and r is not direct
            else (0.0, 0.0, 0.0)
        )
        n = noise.get(r.name)
        lines.append(
            f"{r.name:<14}{_cell(r, n, 'requests_per_s', 16, 0)}"
            f"{_cell(r, n, 'chunks_per_s', 20, 0)}{_cell(r, n, 'p50_ms', 14, 2)}"
            f"{_cell(r, n, 'p99_ms', 14, 2)}{added[0]:>11.2f}{added[1]:>11.2f}"
            f"{_cell(r, n, 'ttfb_p50_ms', 14, 2)}{added[2]:>12.2f}"
            f"{_cell(r, n, 'cpu_us_per_request', 16, 0)}{_cell(r, n, 'load_1m', 13, 1)}"
        )
    return "\n".join(lines)


def _cell(
    result: Measurement, noise: Measurement | None, field: str, width: int, digits: int
) -> str:
    text = f"{getattr(result, field):,.{digits}f}"
    if noise is not None:
        text += f" [{getattr(noise, field):,.{digits}f}]"
    return f"{text:>{width}}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=seconds, default=10.0, help="seconds per wrk run")
    parser.add_argument(
        "--runs", type=positive_int, default=1, help="measure every target this often"
    )
    parser.add_argument("--connections", type=positive_int, default=32)
    parser.add_argument(
        "--stream-chunks", type=positive_int, default=16, help="SSE events per stream"
    )
    parser.add_argument(
        "--workers", type=positive_int, default=2, help="worker processes of ours-cp"
    )
    parser.add_argument(
        "--routers", default="direct,ours,ours-tls,ours-cp,sglang-router,vllm-router",
        help="comma-separated: direct, ours, ours-tls, ours-cp, sglang-router, vllm-router",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        parser.error("needs wrk: apt-get install -y wrk")
    routers = [name.strip() for name in args.routers.split(",") if name.strip()]
    for name in ("sglang-router", "vllm-router"):
        if name in routers and importlib.util.find_spec(name.replace("-", "_")) is None:
            parser.error(f"needs {name}: pip install {name} (or leave it out of --routers)")
    with tempfile.TemporaryDirectory(prefix="router-bench-") as folder:
        setting = Setting(
            args.duration, args.connections, args.stream_chunks, args.workers, Path(folder)
        )
        runs = run(routers, setting, args.runs)
    middle, spread = medians(runs)
    if args.json:
        print(json.dumps({"runs": [[_as_dict(r) for r in one] for one in runs],
                          "median": [_as_dict(r) for r in middle]}))  # fmt: skip
    else:
        if args.runs > 1:
            print(f"medians of {args.runs} runs, [max - min] in brackets")
        print(format_table(middle, spread if args.runs > 1 else ()))
    return 0


def _as_dict(result: Measurement) -> dict[str, float | str]:
    return {field: getattr(result, field) for field in Measurement.__slots__}


if __name__ == "__main__":
    raise SystemExit(main())
