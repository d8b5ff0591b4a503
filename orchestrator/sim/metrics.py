"""vLLM-named metrics for a simulated replica, so dashboards and routers read it like vLLM.

A custom collector rather than prometheus_client metric objects: a step with a thousand decoding
sequences records a thousand inter-token latencies at once (`observe(value, count)`), and the
gauges are read from the batcher at scrape time instead of being pushed every step.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)  # fmt: skip
E2E_BUCKETS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


@dataclass(slots=True)
class WeightedHistogram:
    """A histogram that can record one value many times in O(log buckets)."""

    bounds: Sequence[float]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float, count: int = 1) -> None:
        if count <= 0:
            return
        self.counts[bisect.bisect_left(self.bounds, value)] += count
        self.total += value * count

    def family(
        self, name: str, documentation: str, labels: dict[str, str]
    ) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, documentation, labels=list(labels))
        cumulative, buckets = 0, []
        for bound, count in zip([*map(str, self.bounds), "+Inf"], self.counts, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        family.add_metric(list(labels.values()), buckets, self.total)
        return family


@dataclass(frozen=True, slots=True)
class EngineGauges:
    running: int
    waiting: int
    kv_cache_usage: float


class SimEngineMetrics(Collector):
    """Counters and histograms the live engine feeds; gauges come from `read_gauges` at scrape."""

    def __init__(self, model_name: str, read_gauges: Callable[[], EngineGauges]) -> None:
        self._labels = {"model_name": model_name, "engine": "0"}
        self._read_gauges = read_gauges
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.behind_seconds = 0.0
        self.finished: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.ttft = WeightedHistogram(TTFT_BUCKETS_S)
        self.inter_token = WeightedHistogram(ITL_BUCKETS_S)
        self.time_per_output_token = WeightedHistogram(ITL_BUCKETS_S)
        self.e2e = WeightedHistogram(E2E_BUCKETS_S)

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        names, values = list(self._labels), list(self._labels.values())
        gauges = self._read_gauges()
        for name, doc, value in (
            ("vllm:num_requests_running", "Requests in the running batch.", gauges.running),
            ("vllm:num_requests_waiting", "Requests waiting to be scheduled.", gauges.waiting),
            (
                "vllm:kv_cache_usage_perc",
                "KV-cache usage; 1 means 100 percent.",
                gauges.kv_cache_usage,
            ),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=names)
            gauge.add_metric(values, value)
            yield gauge
        for name, doc, value in (
            ("vllm:prompt_tokens", "Prefill tokens processed.", self.prompt_tokens),
            ("vllm:generation_tokens", "Generation tokens processed.", self.generation_tokens),
            (
                "vllm:num_preemptions",
                "Preemptions (sequences sent back to be recomputed).",
                self.preemptions,
            ),
        ):
            counter = CounterMetricFamily(name, doc, labels=names)
            counter.add_metric(values, value)
            yield counter
        behind = CounterMetricFamily(
            "orchestrator_sim_behind_seconds",
            "Wall time the simulated engine lost because its host could not keep up.",
            labels=names,
        )
        behind.add_metric(values, self.behind_seconds)
        yield behind
        success = CounterMetricFamily(
            "vllm:request_success",
            "Finished requests by reason.",
            labels=[*names, "finished_reason"],
        )
        for reason, count in self.finished.items():
            success.add_metric([*values, reason], count)
        yield success
        yield self.ttft.family(
            "vllm:time_to_first_token_seconds", "Time to first token.", self._labels
        )
        yield self.inter_token.family(
            "vllm:inter_token_latency_seconds", "Time between consecutive tokens.", self._labels
        )
        yield self.time_per_output_token.family(
            "vllm:request_time_per_output_token_seconds",
            "Per-request mean time per output token after the first.",
            self._labels,
        )
        yield self.e2e.family(
            "vllm:e2e_request_latency_seconds", "End-to-end request latency.", self._labels
        )
