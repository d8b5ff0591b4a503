"""Reads an engine's Prometheus `/metrics` page into a `ReplicaLoad`, whatever its metric names.

Only the lines of the series the adapter reads reach the parser: an engine's page is mostly
histograms (vLLM's is about 34 KB), and a router or control plane that parses all of it for five
figures, for hundreds of replicas a second, spends its core on buckets it never reads.

Matching is on sample names, not family names: prometheus_client's parser strips `_total` from a
counter's family name but keeps it on the sample, and a histogram may itself end in `_total`
(`vllm:iteration_tokens_total_bucket`), so family names would mislead.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families

from orchestrator.core.records import ReplicaLoad
from orchestrator.engines.base import MetricNames, Series
from orchestrator.engines.errors import MalformedMetricsPageError, MissingMetricsError

_QUOTED_LINE_CHARS = 120
MAX_PAGE_BYTES = 4 * 1024 * 1024  # a page read to scrape, at most (vLLM's is tens of KB)
_Labels = frozenset[tuple[str, str]]
_Sample = tuple[str, dict[str, str], float]
# A plain sample line: `name{a="x",b="y"} value`, no escapes, no spaces in the braces, no
# timestamp or exemplar; anything else goes to prometheus_client's parser.
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
_PLAIN_LABELS = re.compile(rf"(?:{_LABEL}(?:,{_LABEL})*,?)?")
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"\\]*)"')
_PLAIN_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_PLAIN_VALUE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?Inf|NaN")


def parse_replica_load(exposition_text: str, names: MetricNames, now_s: float) -> ReplicaLoad:
    """The load that `exposition_text` reports, stamped `observed_at_s=now_s`.

    One engine process may report several label sets per metric (data-parallel engines, several
    model names): request counts and token counters are summed across them; KV usage takes the
    maximum, because the fullest engine is the one that queues first. Series that differ only in a
    label of `names.replicated_labels` (SGLang's `tp_rank`, `pp_rank`: ranks of one engine that
    report the same figure) count once, at their maximum. A figure of `names.required` that the
    page lacks raises `MissingMetricsError` (a renamed metric, or stats logging off: reading it as
    0 would make a busy replica look idle); a missing optional counter reads as `None`. Raises
    `MalformedMetricsPageError` (a ValueError) for text that is not an exposition page, for a
    series given twice, and for values that are not finite and non-negative, or a KV usage above 1
    (not a ratio).
    """
    series = names.all_series()
    found = _values_by_series(exposition_text, series, names.replicated_labels)
    kv_cache_usage = _kv_usage(names.kv_cache_usage, found[names.kv_cache_usage])
    missing = [s.spelled() for s in names.required_series() if not found[s]]
    if missing:
        _raise_if_malformed(exposition_text)  # an HTML error page is not "missing metrics"
        raise MissingMetricsError(missing)
    return ReplicaLoad(
        running=round(_sum(found, names.running)),
        waiting=round(_sum(found, names.waiting)),
        kv_cache_usage=kv_cache_usage,
        prompt_tokens_total=_total_or_none(found, names.prompt_tokens),
        generation_tokens_total=_total_or_none(found, names.generation_tokens),
        observed_at_s=now_s,
    )


def wanted_lines(text: str, sample_names: Iterable[str]) -> str:
    """The lines of `text` whose sample name is one of `sample_names`, newline-terminated.

    Found by searching for each name at a line start (a scan in C, not a loop over every line
    in Python). `# HELP`/`# TYPE` lines are dropped too: without them the parser reads each sample
    as untyped, keeping its name as written, which is what matching on sample names wants.
    """
    padded = "\n" + text
    kept = []
    for name in sorted(set(sample_names)):
        needle = "\n" + name
        at = padded.find(needle)
        while at >= 0:
            end = padded.find("\n", at + 1)
            line = padded[at + 1 :] if end < 0 else padded[at + 1 : end]
            if _name_of(line) == name:
                kept.append(line)
            at = -1 if end < 0 else padded.find(needle, end)
    return "\n".join(kept) + "\n" if kept else ""


def _name_of(line: str) -> str:
    end = len(line)
    for stop in ("{", " ", "\t"):
        at = line.find(stop)
        if 0 <= at < end:
            end = at
    return line[:end]


def _values_by_series(
    text: str, wanted: tuple[Series, ...], replicated: frozenset[str]
) -> dict[Series, list[float]]:
    """Every value of each wanted series, one per label set once replicated ranks are merged."""
    by_name: dict[str, list[Series]] = {}
    for entry in wanted:
        by_name.setdefault(entry.name, []).append(entry)
    page = wanted_lines(text, by_name)
    samples = plain_samples(page)
    if samples is None:
        try:
            samples = [
                (sample.name, sample.labels, sample.value)
                for family in text_string_to_metric_families(page)
                for sample in family.samples
            ]
        except ValueError as exc:
            # Line numbers of the whole page, so the message points where the reader will look.
            raise MalformedMetricsPageError(_describe_parse_error(text, exc)) from exc
    merged: dict[Series, dict[_Labels, float]] = {entry: {} for entry in wanted}
    seen: set[tuple[str, _Labels]] = set()
    for name, sample_labels, value in samples:
        labels = frozenset(sample_labels.items())
        key = (name, labels)
        if key in seen:
            raise MalformedMetricsPageError(
                f"series {name}{sample_labels} appears twice; refusing to count it twice"
            )
        seen.add(key)
        for entry in by_name.get(name, ()):
            if not entry.matches(sample_labels):
                continue
            if not (math.isfinite(value) and value >= 0):
                raise MalformedMetricsPageError(
                    f"{name}{sample_labels} is {value}; expected a finite value >= 0"
                )
            group = frozenset(item for item in labels if item[0] not in replicated)
            values = merged[entry]
            values[group] = max(values.get(group, 0.0), value)
    return {entry: list(values.values()) for entry, values in merged.items()}


def plain_samples(page: str) -> list[_Sample] | None:
    """The samples of `page` (lines as `wanted_lines` keeps them) when every line is a plain one
    (`name{a="x",b="y"} value`: no escapes, no spaces between the braces, no timestamp); None
    when any is not, and prometheus_client's parser reads the page instead. Where both read a
    page they read the same samples (a test holds them to it); this one costs a fraction: the
    control plane reads hundreds of pages a second."""
    samples: list[_Sample] = []
    for line in page.splitlines():
        brace = line.find("{")
        if brace < 0:
            name, space, value = line.partition(" ")
            labels: dict[str, str] = {}
        else:
            close = line.rfind("}")
            body = line[brace + 1 : close]
            if close < brace or line[close + 1 : close + 2] != " " or "\\" in body:
                return None
            if _PLAIN_LABELS.fullmatch(body) is None:
                return None
            pairs = _LABEL_PAIR.findall(body)
            labels = dict(pairs)
            if len(labels) != len(pairs) or "__name__" in labels:
                return None
            name, space, value = line[:brace], " ", line[close + 2 :]
        if (
            not space
            or _PLAIN_NAME.fullmatch(name) is None
            or _PLAIN_VALUE.fullmatch(value) is None
        ):
            return None
        samples.append((name, labels, float(value)))
    return samples


def _raise_if_malformed(text: str) -> None:
    """Parse the whole page (only on the error path, where the cost does not matter)."""
    try:
        for _family in text_string_to_metric_families(text):
            pass
    except ValueError as exc:
        raise MalformedMetricsPageError(_describe_parse_error(text, exc)) from exc


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


def _sum(found: dict[Series, list[float]], parts: tuple[Series, ...]) -> float:
    return math.fsum(value for part in parts for value in found[part])


def _kv_usage(series: Series, values: list[float]) -> float:
    usage = max(values, default=0.0)
    if usage > 1.0:
        raise MalformedMetricsPageError(
            f"{series.spelled()} is {usage}; expected a ratio in [0, 1] (is the engine reporting"
            " percent?)"
        )
    return usage


def _total_or_none(found: dict[Series, list[float]], parts: tuple[Series, ...]) -> float | None:
    if not parts or not any(found[part] for part in parts):
        return None
    return _sum(found, parts)
