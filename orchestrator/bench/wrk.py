"""Load and latency probes over HTTP: `wrk` runs (requests/s and latency percentiles) and the
time to a streamed completion's first byte, one request at a time on one connection."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import ssl
import statistics
import subprocess
import time
from pathlib import Path

PROMPT = "Benchmark the router, not the model."


def wrk_script(path: Path, model: str, stream: bool) -> Path:
    body = json.dumps({"model": model, "prompt": PROMPT, "max_tokens": 16, "stream": stream})
    path.write_text(
        'wrk.method = "POST"\n'
        f"wrk.body = {json.dumps(body)}\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    return path


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def run_wrk(
    url: str, script: Path, connections: int, duration_s: float
) -> tuple[float, dict[int, float]]:
    """Requests/s and latency percentiles (ms) from one wrk run; non-2xx answers are an error."""
    command = ["wrk", "-t1", f"-c{connections}", f"-d{duration_s:g}s", "--latency"]
    output = subprocess.run(
        [*command, "-s", str(script), url],
        capture_output=True, text=True, check=True, timeout=duration_s + 60,
    ).stdout  # fmt: skip
    if "Non-2xx" in output or "Socket errors" in output:
        raise RuntimeError(f"wrk saw errors against {url}:\n{output}")
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    percentiles = {}
    for pct, value, unit in re.findall(r"^\s+(\d+)%\s+([\d.]+)(us|ms|s)\s*$", output, re.M):
        percentiles[int(pct)] = float(value) * _UNITS[unit]
    return rate, percentiles


def first_byte_ms(url: str, model: str, samples: int, tls: ssl.SSLContext | None) -> float:
    """Median time to the first response byte of a streamed completion, one at a time."""
    host, port = re.match(r"https?://([^:/]+):(\d+)", url).groups()  # type: ignore[union-attr]
    body = json.dumps({"model": model, "prompt": PROMPT, "max_tokens": 16, "stream": True}).encode()
    request = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    times = []
    with contextlib.ExitStack() as stack:
        connection = stack.enter_context(socket.create_connection((host, int(port)), timeout=10))
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            connection = stack.enter_context(tls.wrap_socket(connection, server_hostname=host))
        for _ in range(samples):
            start = time.perf_counter()
            connection.sendall(request)
            data = connection.recv(65536)
            times.append((time.perf_counter() - start) * 1e3)
            while not data.endswith(b"0\r\n\r\n"):  # drain the chunked body
                more = connection.recv(65536)
                if not more:
                    raise RuntimeError(f"{url} closed the connection mid-stream")
                data += more
    return statistics.median(times)
