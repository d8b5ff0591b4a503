"""A `/metrics` page shaped like a vLLM server's: its gauges, counters and a dozen histograms
with vLLM's default buckets (about 34 KB), for benchmarks of whatever scrapes engines.

Built with prometheus_client from the family names and bucket bounds vLLM's V1 logger uses, so
its size and line mix are what a scraper meets; the values are arbitrary but plausible.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    gc_collector,
    generate_latest,
    platform_collector,
    process_collector,
)

_MODEL = "openai/gpt-oss-120b"
_LATENCY_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
_TOKEN_GAP_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
_REQUEST_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
              120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
_TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000,
           131072)  # fmt: skip
_ITERATION_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def vllm_metrics_page(engines: int = 1) -> bytes:
    """The page of one vLLM server with `engines` data-parallel engines (label `engine`)."""
    registry = CollectorRegistry()
    for collector in (gc_collector.GCCollector, platform_collector.PlatformCollector):
        collector(registry=registry)
    process_collector.ProcessCollector(registry=registry)
    labels = ["model_name", "engine"]
    gauges = {
        "vllm:num_requests_running": 3.0,
        "vllm:num_requests_waiting": 0.0,
        "vllm:kv_cache_usage_perc": 0.21,
    }
    counters = {
        "vllm:num_preemptions": 2.0,
        "vllm:prompt_tokens": 1_250_000.0,
        "vllm:generation_tokens": 320_000.0,
        "vllm:prefix_cache_queries": 1_250_000.0,
        "vllm:prefix_cache_hits": 410_000.0,
    }
    histograms = {
        "vllm:time_to_first_token_seconds": _LATENCY_S,
        "vllm:inter_token_latency_seconds": _TOKEN_GAP_S,
        "vllm:time_per_output_token_seconds": _TOKEN_GAP_S,
        "vllm:e2e_request_latency_seconds": _REQUEST_S,
        "vllm:request_queue_time_seconds": _REQUEST_S,
        "vllm:request_inference_time_seconds": _REQUEST_S,
        "vllm:request_prefill_time_seconds": _REQUEST_S,
        "vllm:request_decode_time_seconds": _REQUEST_S,
        "vllm:request_prompt_tokens": _TOKENS,
        "vllm:request_generation_tokens": _TOKENS,
        "vllm:request_max_num_generation_tokens": _TOKENS,
        "vllm:iteration_tokens_total": _ITERATION_TOKENS,
    }
    made_gauges = [Gauge(n, n, labels, registry=registry) for n in gauges]
    made_counters = [Counter(n, n, labels, registry=registry) for n in counters]
    success = Counter(
        "vllm:request_success", "finished", [*labels, "finished_reason"], registry=registry
    )
    made_histograms = [
        Histogram(n, n, labels, buckets=b, registry=registry) for n, b in histograms.items()
    ]
    for engine in range(engines):
        at = (_MODEL, str(engine))
        for gauge, value in zip(made_gauges, gauges.values(), strict=True):
            gauge.labels(*at).set(value)
        for counter, value in zip(made_counters, counters.values(), strict=True):
            counter.labels(*at).inc(value)
        for reason in ("stop", "length", "abort"):
            success.labels(*at, reason).inc(100)
        for histogram, bounds in zip(made_histograms, histograms.values(), strict=True):
            for bound in bounds[::3]:
                histogram.labels(*at).observe(bound * 0.9)
    return generate_latest(registry)
