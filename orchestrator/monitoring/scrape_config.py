"""Prometheus configuration for a set of scrape targets: one job per kind of process, each target
with its labels attached (`static_configs` labels), so series name their site, pool and node; and
jobs whose targets come from HTTP service discovery (`http_sd_configs`), labelled by the server
that lists them, for processes that come and go while Prometheus runs (the engines)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

# Exporters label their own series with node and site; the scrape keeps those (honor_labels)
# instead of renaming them to exported_node / exported_site.
JOBS_HONORING_LABELS: Final = frozenset({"exporter"})
_LABEL_NAME: Final = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_ADDRESS: Final = re.compile(r"^[^/\s:]+:\d+$")


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    """One process to scrape: `address` is host:port, `labels` are attached to all its series."""

    job: str
    address: str
    labels: Mapping[str, str] = field(default_factory=dict)
    metrics_path: str = "/metrics"

    def __post_init__(self) -> None:
        if not _LABEL_NAME.match(self.job):
            raise ValueError(f"job {self.job!r} is not a valid Prometheus label value here")
        if not _ADDRESS.match(self.address):
            raise ValueError(f"target address {self.address!r}: expected host:port")
        for name in self.labels:
            if not _LABEL_NAME.match(name) or name.startswith("__"):
                raise ValueError(f"target label {name!r} is not a valid Prometheus label name")


@dataclass(frozen=True, slots=True)
class DiscoveredJob:
    """A job whose targets an HTTP SD endpoint lists (`url`), re-read every `refresh_s`.

    Its targets carry the labels the endpoint gives them; `tls` (a `tls_config` mapping: ca_file,
    cert_file, key_file) is used both to fetch the list and to scrape when it lists https targets.
    """

    job: str
    url: str
    refresh_s: float = 5.0
    tls: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if not _LABEL_NAME.match(self.job):
            raise ValueError(f"job {self.job!r} is not a valid Prometheus label value here")
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"service discovery URL {self.url!r}: expected http(s)://host:port/…")
        if not self.refresh_s > 0:
            raise ValueError(f"refresh_s must be > 0, got {self.refresh_s}")

    def scrape_config(self) -> dict[str, Any]:
        sd: dict[str, Any] = {"url": self.url, "refresh_interval": _duration(self.refresh_s)}
        job: dict[str, Any] = {
            "job_name": self.job,
            "metrics_path": "/metrics",
            "honor_labels": self.job in JOBS_HONORING_LABELS,
        }
        if self.tls is not None:
            sd["tls_config"] = dict(self.tls)
            job["tls_config"] = dict(self.tls)
        return {**job, "http_sd_configs": [sd]}


def prometheus_config(
    targets: Sequence[ScrapeTarget],
    *,
    rule_files: Sequence[str],
    scrape_interval_s: float,
    evaluation_interval_s: float,
    discovered: Sequence[DiscoveredJob] = (),
) -> dict[str, Any]:
    """The `prometheus.yml` document scraping `targets`, one job per `job` name, and the
    `discovered` jobs (a job name given both ways is refused: Prometheus would reject it)."""
    for name, value in (
        ("scrape_interval_s", scrape_interval_s),
        ("evaluation_interval_s", evaluation_interval_s),
    ):
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value}")
    jobs: dict[tuple[str, str], list[ScrapeTarget]] = {}
    for target in targets:
        jobs.setdefault((target.job, target.metrics_path), []).append(target)
    static_jobs = {job for job, _ in jobs}
    for found in discovered:
        if found.job in static_jobs:
            raise ValueError(f"job {found.job!r} has static targets and service discovery both")
    scrape_interval = _duration(scrape_interval_s)
    return {
        "global": {
            "scrape_interval": scrape_interval,
            "scrape_timeout": scrape_interval,
            "evaluation_interval": _duration(evaluation_interval_s),
        },
        "rule_files": list(rule_files),
        "scrape_configs": [
            {
                "job_name": job if path == "/metrics" else f"{job}{path.replace('/', '_')}",
                "metrics_path": path,
                "honor_labels": job in JOBS_HONORING_LABELS,
                "static_configs": [
                    {"targets": [t.address], "labels": {"job": job, **t.labels}} for t in members
                ],
            }
            for (job, path), members in jobs.items()
        ]
        + [found.scrape_config() for found in discovered],
    }


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"
