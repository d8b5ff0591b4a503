"""Slow readers: 50 streams through a router process, 5 of whose clients read one byte a second.
The other 45 finish at normal speed; each slow stream is cut once its unread bytes pass the
per-stream buffer cap, which cancels its upstream request (the replica aborts it); the router's
memory stays within the stated bound.

The bound: the router's RSS grows by less than `RSS_BOUND_MIB` over the run. Uncut, each slow
stream would pile up its whole answer (`SLOW_TOKENS` events, about 4 MiB) in the router."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from replica_server import ReplicaThread, replica
from router_harness import (
    METRICS_URLS,
    MODEL,
    ReplicaEntry,
    free_port,
    get_status,
    metric_value,
    running_router,
    wait_until,
)

from orchestrator.core.generations import Generation
from orchestrator.frontends.http.settings import HttpSettings
from orchestrator.sim.replica import ReplicaSettings

STREAMS = 50
SLOW = 5
FAST_TOKENS = 200
SLOW_TOKENS = 24_000
BUFFER_CAP = 64 * 1024
RSS_BOUND_MIB = 24.0
SLOW_READ_S = 6.0


@pytest.fixture(scope="module")
def instant() -> Iterator[ReplicaThread]:
    with replica(ReplicaSettings(Generation.MI355X, time_scale=0.0, seed=13)) as server:
        yield server


@pytest.fixture(scope="module")
def generating() -> Iterator[ReplicaThread]:
    """A replica still generating when the cut comes, so the cancel shows as an abort (an
    instant replica may already have finished the whole answer by then on a busy machine)."""
    with replica(ReplicaSettings(Generation.MI355X, time_scale=0.05, seed=19)) as server:
        yield server


@pytest.fixture
def router_process(instant: ReplicaThread, tmp_path: Path) -> Iterator[tuple[str, int]]:
    config = tmp_path / "replicas.yaml"
    config.write_text(
        "apiVersion: orchestrator/v1alpha1\nkind: Replicas\n"
        f"model: {MODEL}\nreplicas:\n"
        f'  - {{id: r-0, url: "{instant.url}", pool: p, site: lab, generation: MI355X,'
        " engine: sim}\n"
    )
    port, metrics_port = free_port(), free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "--log-level", "WARNING", "router", "--config",
         str(config), "--port", str(port), "--grpc-port", "0", "--admission", "off",
         "--stream-buffer-bytes", str(BUFFER_CAP), "--metrics-port", str(metrics_port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: get_status(f"{url}/ready") == 200, 30, 0.05)
        METRICS_URLS[url] = f"http://127.0.0.1:{metrics_port}"
        yield url, process.pid
    finally:
        METRICS_URLS.pop(url, None)
        process.terminate()
        process.wait(timeout=15)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def start_stream(url: str, max_tokens: int, receive_buffer: int | None = None) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    if receive_buffer is not None:  # a small window, as a slow client over a slow link has
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(60)
    sock.connect((host, int(port)))
    body = json.dumps({"model": MODEL, "prompt": "Go on.", "max_tokens": max_tokens,
                       "ignore_eos": True, "stream": True}).encode()  # fmt: skip
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    return sock


def read_all(sock: socket.socket, results: list[tuple[float, bytes]], started: float) -> None:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
        if data.endswith(b"0\r\n\r\n"):
            break
    results.append((time.monotonic() - started, data))
    sock.close()


@pytest.mark.slow
def test_fifty_streams_with_five_slow_readers(
    router_process: tuple[str, int], instant: ReplicaThread
) -> None:
    url, pid = router_process
    for _ in range(3):  # warm up: the router's first requests allocate what it keeps
        read_all(start_stream(url, FAST_TOKENS), [], time.monotonic())
    baseline = rss_mib(pid)
    aborted_before = metric_value(instant.url, "vllm:request_success_total",
                                  finished_reason="abort")  # fmt: skip
    slow = [start_stream(url, SLOW_TOKENS, receive_buffer=4096) for _ in range(SLOW)]
    started = time.monotonic()
    fast_results: list[tuple[float, bytes]] = []
    readers = [
        threading.Thread(target=read_all, args=(start_stream(url, FAST_TOKENS), fast_results,
                                                started))
        for _ in range(STREAMS - SLOW)
    ]  # fmt: skip
    for reader in readers:
        reader.start()
    peak = baseline
    deadline = started + SLOW_READ_S
    while time.monotonic() < deadline:  # the slow clients read one byte a second
        for sock in slow:
            sock.recv(1)
        peak = max(peak, rss_mib(pid))
        time.sleep(1.0)
    for reader in readers:
        reader.join(timeout=30)

    assert len(fast_results) == STREAMS - SLOW
    for _, data in fast_results:
        assert data.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in data
        assert data.count(b'"text"') >= FAST_TOKENS
    slowest_fast_s = max(elapsed for elapsed, _ in fast_results)
    assert slowest_fast_s < SLOW_READ_S  # done while the slow readers had read a few bytes

    cut = lambda: metric_value(url, "orchestrator_router_streams_cut_total")  # noqa: E731
    assert wait_until(lambda: cut() == SLOW, 10)
    assert wait_until(
        lambda: (
            metric_value(instant.url, "vllm:request_success_total", finished_reason="abort")
            >= aborted_before + SLOW
        ),
        10,
    )
    assert wait_until(lambda: metric_value(instant.url, "vllm:num_requests_running") == 0, 10)
    peak = max(peak, rss_mib(pid))
    print(f"router RSS {baseline:.1f} MiB before, {peak:.1f} MiB at most; fast streams done in"
          f" {slowest_fast_s:.2f} s")  # fmt: skip
    assert peak - baseline < RSS_BOUND_MIB, (baseline, peak)
    for sock in slow:
        sock.close()


def test_a_slow_reader_on_the_aiohttp_path_is_cut_too(generating: ReplicaThread) -> None:
    """A chunked request body sends the connection to aiohttp; its streams obey the same cap."""
    http = HttpSettings(stream_buffer_bytes=BUFFER_CAP)
    with running_router([ReplicaEntry("r-0", generating.url)], http=http) as router:
        aborted_before = metric_value(generating.url, "vllm:request_success_total",
                                      finished_reason="abort")  # fmt: skip
        host, port = router.url.removeprefix("http://").split(":")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        body = json.dumps({"model": MODEL, "prompt": "Go on.", "max_tokens": SLOW_TOKENS,
                           "ignore_eos": True, "stream": True}).encode()  # fmt: skip
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        )
        try:
            cut = lambda: router.metric("orchestrator_router_streams_cut_total")  # noqa: E731
            assert wait_until(lambda: cut() == 1, 15)
            assert wait_until(
                lambda: metric_value(generating.url, "vllm:request_success_total",
                                     finished_reason="abort") >= aborted_before + 1,
                20,
            )  # fmt: skip
        finally:
            sock.close()
