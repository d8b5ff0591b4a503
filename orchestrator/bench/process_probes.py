"""What a benchmark reads off a running process: its CPU from /proc, a server's `/health`
latency, and figures from its Prometheus page (a histogram's p99 bucket)."""

from __future__ import annotations

import contextlib
import http.client
import os
import statistics
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def session_cpu_seconds(session: int) -> float:
    """CPU seconds (user + system) of every live process in session `session`: a server and
    the workers it started (`processes.child` starts each server in a session of its own)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # it exited meanwhile
            continue
        if int(fields[3]) == session:
            total += (int(fields[11]) + int(fields[12])) / _TICKS_PER_S
    return total


def cpu_shares(pids: dict[str, int], window_s: float) -> dict[str, float]:
    """Each process's CPU over the next `window_s` seconds, as a share of one core."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    started = time.monotonic()
    time.sleep(window_s)
    elapsed = time.monotonic() - started
    return {name: (cpu_seconds(pid) - before[name]) / elapsed for name, pid in pids.items()}


def health_p99_ms(url: str, samples: int = 100, budget_s: float = 20.0) -> float:
    """p99 of sequential `/health` requests: `samples` of them, or as many as `budget_s` allows
    (a saturated router answers in seconds)."""
    host, port = url.removeprefix("http://").split(":")
    times: list[float] = []
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    deadline = time.monotonic() + budget_s
    with contextlib.closing(connection):
        while len(times) < samples and (len(times) < 2 or time.monotonic() < deadline):
            started = time.perf_counter()
            connection.request("GET", "/health")
            connection.getresponse().read()
            times.append((time.perf_counter() - started) * 1e3)
            time.sleep(0.01)
    return statistics.quantiles(times, n=100)[98]


def metric_samples(metrics_port: int) -> list[Any]:
    """The samples a router serves on its metrics port."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def histogram_p99(samples: list[Any], name: str) -> float | None:
    """The upper bound of the bucket holding the 99th percentile."""
    buckets = sorted(
        (float(s.labels["le"]), s.value) for s in samples if s.name == f"{name}_bucket"
    )
    if not buckets or buckets[-1][1] == 0:
        return None
    total = buckets[-1][1]
    return next(bound for bound, count in buckets if count >= 0.99 * total)
