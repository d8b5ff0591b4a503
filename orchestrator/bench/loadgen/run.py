"""Run LoadGen against an endpoint: settings from the command line, LoadGen's logs, our report.

Latency limits are MLPerf's Server limits (p99 TTFT 3 s, p99 TPOT 80 ms) times the stack's time
scale: a simulated fleet running X times slower than hardware gets X times the limits, and its
tokens/s times X is what the hardware would do.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import mlperf_loadgen as lg

from orchestrator.bench.loadgen.client import MODEL, GrpcClient, HttpClient, StreamClient
from orchestrator.bench.loadgen.dataset import Dataset
from orchestrator.bench.loadgen.report import Report, build_report
from orchestrator.bench.loadgen.sut import Progress, StreamingSut
from orchestrator.fleet.figures import load_figures

SCENARIOS = {"Offline": lg.TestScenario.Offline, "Server": lg.TestScenario.Server}


@dataclass(frozen=True, slots=True)
class LoadgenSettings:
    endpoint: str
    scenario: str
    target_qps: float = 1.0
    duration_s: float = 60.0
    transport: str = "http"
    time_scale: float = 1.0
    samples: int = 512
    seed: int = 0
    max_output_tokens: int | None = None
    max_in_flight: int = 256
    out_dir: Path = Path("loadgen-out")
    model: str = MODEL

    @property
    def ttft_limit_s(self) -> float:
        return load_figures().workload.server_latency_p99.ttft_s * self.time_scale

    @property
    def tpot_limit_s(self) -> float:
        return load_figures().workload.server_latency_p99.tpot_s * self.time_scale


def test_settings(settings: LoadgenSettings) -> lg.TestSettings:
    test = lg.TestSettings()
    test.scenario = SCENARIOS[settings.scenario]
    test.mode = lg.TestMode.PerformanceOnly
    test.use_token_latencies = True
    test.ttft_latency = int(settings.ttft_limit_s * 1e9)
    test.tpot_latency = int(settings.tpot_limit_s * 1e9)
    test.min_duration_ms = int(settings.duration_s * 1000)
    test.max_duration_ms = int(settings.duration_s * 1000 * 3 + 60_000)
    queries = max(1, int(settings.target_qps * settings.duration_s))
    test.min_query_count = queries
    test.max_query_count = queries if settings.scenario == "Server" else settings.samples
    test.server_target_qps = settings.target_qps
    test.offline_expected_qps = settings.target_qps
    test.server_target_latency_ns = test.ttft_latency
    test.performance_sample_count_override = settings.samples
    test.sample_index_rng_seed = settings.seed + 1
    test.schedule_rng_seed = settings.seed + 2
    test.qsl_rng_seed = settings.seed + 3
    return test


def _client(settings: LoadgenSettings) -> StreamClient:
    if settings.transport == "grpc":
        return GrpcClient(settings.endpoint, settings.model)
    return HttpClient(settings.endpoint, settings.model)


def _progress_bar(progress: Progress, expected: int, stop: threading.Event) -> None:
    """One line on stderr, redrawn twice a second."""
    started = time.monotonic()
    while not stop.wait(0.5):
        done = progress.completed
        width = 30
        filled = min(width, int(width * done / max(1, expected)))
        print(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{expected} done, "
            f"{progress.issued - done} in flight, {progress.output_tokens:,} tokens, "
            f"{time.monotonic() - started:.0f} s",
            end="", file=sys.stderr, flush=True,
        )  # fmt: skip
    print(file=sys.stderr, flush=True)


def run_loadgen(settings: LoadgenSettings) -> Report:
    """Run one LoadGen test; LoadGen's logs and report.json/report.png land in `out_dir`."""
    if settings.scenario not in SCENARIOS:
        raise ValueError(f"scenario must be Offline or Server, got {settings.scenario!r}")
    dataset = Dataset.synthetic(
        settings.samples, settings.seed, max_output_tokens=settings.max_output_tokens
    )
    out = settings.out_dir
    out.mkdir(parents=True, exist_ok=True)
    limit = settings.max_in_flight if settings.scenario == "Offline" else None
    sut = StreamingSut(dataset, lambda: _client(settings), max_in_flight=limit)
    handle = lg.ConstructSUT(sut.issue, sut.flush)
    qsl = lg.ConstructQSL(len(dataset), len(dataset), lambda _: None, lambda _: None)
    log = lg.LogSettings()
    log.log_output.outdir = str(out)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False
    expected = max(1, int(settings.target_qps * settings.duration_s))
    if settings.scenario == "Offline":
        expected = max(expected, settings.samples)
    stop = threading.Event()
    bar = threading.Thread(target=_progress_bar, args=(sut.progress, expected, stop), daemon=True)
    bar.start()
    started = time.perf_counter()
    try:
        lg.StartTestWithLogSettings(handle, qsl, test_settings(settings), log)
    finally:
        stop.set()
        bar.join()
        lg.DestroyQSL(qsl)
        lg.DestroySUT(handle)
        sut.close()
    elapsed = time.perf_counter() - started
    return build_report(settings, dataset, sut.progress, elapsed, out)
