"""Reads an engine's Prometheus `/metrics` page into a `ReplicaLoad`, whatever its metric names.

Matching is on sample names, not family names: prometheus_client's parser strips `_total` from a
counter's family name but keeps it on the sample, and a histogram may itself end in `_total`
(`vllm:iteration_tokens_total_bucket`), so family names would mislead.
"""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from orchestrator.core.records import ReplicaLoad
from orchestrator.engines.base import MetricNames
from orchestrator.engines.errors import MalformedMetricsPageError

_QUOTED_LINE_CHARS = 120


def parse_replica_load(exposition_text: str, names: MetricNames, now_s: float) -> ReplicaLoad:
    """The load that `exposition_text` reports, stamped `observed_at_s=now_s`.

    One engine process may report several label sets per metric (data-parallel engines, several
    model names): request counts and token counters are summed across them; KV usage takes the
    maximum, because the fullest engine is the one that queues first. A missing gauge reads as 0
    (engines omit a gauge until it is first set, which means idle); a missing counter reads as
    `None` (the engine does not export it). Raises `MalformedMetricsPageError` (a ValueError) for
    text that is not an exposition page, for a series given twice, and for values that are not
    finite and non-negative, or a KV usage above 1 (not a ratio).
    """
    found = _values_by_sample_name(exposition_text, _wanted(names))
    return ReplicaLoad(
        running=round(math.fsum(found[names.running])),
        waiting=round(math.fsum(found[names.waiting])),
        kv_cache_usage=_kv_usage(names.kv_cache_usage, found[names.kv_cache_usage]),
        prompt_tokens_total=_total_or_none(found[names.prompt_tokens_total]),
        generation_tokens_total=_total_or_none(found[names.generation_tokens_total]),
        observed_at_s=now_s,
    )


def _wanted(names: MetricNames) -> frozenset[str]:
    return frozenset(
        (
            names.running,
            names.waiting,
            names.kv_cache_usage,
            names.prompt_tokens_total,
            names.generation_tokens_total,
        )
    )


def _values_by_sample_name(text: str, wanted: frozenset[str]) -> dict[str, list[float]]:
    """Every value of each wanted sample name, one per label set."""
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise MalformedMetricsPageError(_describe_parse_error(text, exc)) from exc
    found: dict[str, list[float]] = {name: [] for name in wanted}
    seen: set[tuple[str, frozenset[tuple[str, str]]]] = set()
    for family in families:
        for sample in family.samples:
            if sample.name not in wanted:
                continue
            series = (sample.name, frozenset(sample.labels.items()))
            if series in seen:
                raise MalformedMetricsPageError(
                    f"series {sample.name}{sample.labels} appears twice; refusing to count it twice"
                )
            seen.add(series)
            if not (math.isfinite(sample.value) and sample.value >= 0):
                raise MalformedMetricsPageError(
                    f"{sample.name}{sample.labels} is {sample.value}; expected a finite value >= 0"
                )
            found[sample.name].append(sample.value)
    return found


def _describe_parse_error(text: str, exc: ValueError) -> str:
    """Name the first line the parser rejects on its own; the parser's own message names none."""
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            list(text_string_to_metric_families(line + "\n"))
        except ValueError as line_exc:
            quoted = line[:_QUOTED_LINE_CHARS]
            return f"line {number} {quoted!r} is not Prometheus text format{_reason(line_exc)}"
    return f"not Prometheus text format{_reason(exc)}"


def _reason(exc: ValueError) -> str:
    return f" ({exc})" if str(exc) else ""


def _kv_usage(name: str, values: list[float]) -> float:
    usage = max(values, default=0.0)
    if usage > 1.0:
        raise MalformedMetricsPageError(
            f"{name} is {usage}; expected a ratio in [0, 1] (is the engine reporting percent?)"
        )
    return usage


def _total_or_none(values: list[float]) -> float | None:
    return math.fsum(values) if values else None
