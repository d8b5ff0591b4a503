"""Read a simulated replica's `/metrics` as Prometheus does, for tests that watch the engine."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

MODEL_NAME = "openai/gpt-oss-120b"


def families(base_url: str, timeout_s: float = 5.0) -> list[Metric]:
    """Every metric family the replica exposes right now."""
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=timeout_s) as response:
        return list(text_string_to_metric_families(response.read().decode()))


def metric_names(base_url: str) -> set[str]:
    """Family and sample names, so both `vllm:prompt_tokens_total` and a histogram's name match."""
    names: set[str] = set()
    for family in families(base_url):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


def value(base_url: str, name: str, **labels: str) -> float:
    """Sum of the samples called `name` whose labels include `labels`."""
    return sum(
        sample.value
        for family in families(base_url)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def wait_until(condition: Callable[[], bool], timeout_s: float, interval_s: float = 0.02) -> bool:
    """Poll `condition` until it holds or `timeout_s` passes; says whether it held."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)
    return True
