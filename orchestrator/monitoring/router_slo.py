"""The SLO part of `orchestrator status --router URL`: the latency targets a router routes
against and the attainment it counted, per class and pool, read from the router's `/metrics`.

Attainment here is since the router started (its counters' totals); the recording rules give
it over 5 minutes.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.slo import SloOutcome

TARGETS = "orchestrator_router_slo_target_seconds"
OUTCOMES = "orchestrator_router_slo_requests_total"


@dataclass(frozen=True, slots=True)
class PoolAttainment:
    priority: str
    pool: str
    generation: str
    counts: dict[str, float]

    @property
    def answered(self) -> float:
        return sum(self.counts.values())

    @property
    def attainment(self) -> float | None:
        met = self.counts.get(SloOutcome.MET.value, 0.0)
        return met / self.answered if self.answered else None


@dataclass(frozen=True, slots=True)
class RouterSlo:
    targets: dict[tuple[str, str], dict[str, float]]  # (model, class) → kind → wall seconds
    pools: list[PoolAttainment]

    def to_json(self) -> dict[str, object]:
        return {
            "targets": [
                {"model": model, "class": slo_class, **{f"{k}_s": v for k, v in kinds.items()}}
                for (model, slo_class), kinds in sorted(self.targets.items())
            ],
            "attainment": [
                {"class": p.priority, "pool": p.pool, "generation": p.generation,
                 "answered": p.answered, "attainment": p.attainment, "outcomes": p.counts}
                for p in self.pools
            ],
        }  # fmt: skip


def parse_router_slo(text: str) -> RouterSlo:
    targets: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    counts: dict[tuple[str, str, str], dict[str, float]] = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == TARGETS:
                targets[(labels["model"], labels["priority"])][labels["kind"]] = sample.value
            elif sample.name == OUTCOMES:
                key = (labels["priority"], labels["pool"], labels["generation"])
                outcome = labels["outcome"]
                counts[key][outcome] = counts[key].get(outcome, 0.0) + sample.value
    pools = [PoolAttainment(*key, counts=value) for key, value in sorted(counts.items())]
    return RouterSlo(dict(targets), pools)


def router_slo(url: str, timeout_s: float = 5.0) -> RouterSlo:
    """Read a router's targets and outcome counts; UNAVAILABLE names the router on failure."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/metrics", timeout=timeout_s) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise OrchestratorError(
            ErrorCode.UNAVAILABLE, f"cannot read the router's metrics at {url}: {error}"
        ) from None
    return parse_router_slo(text)


def format_router_slo(status: RouterSlo) -> str:
    lines = ["latency targets (p99, wall seconds):"]
    lines.append(f"  {'model':<24}{'class':<14}{'TTFT':>8}{'TPOT':>8}{'e2e':>8}")
    for (model, slo_class), kinds in sorted(status.targets.items()):
        e2e = f"{kinds['e2e']:>8g}" if "e2e" in kinds else f"{'-':>8}"
        lines.append(
            f"  {model:<24}{slo_class:<14}{kinds.get('ttft', 0):>8g}{kinds.get('tpot', 0):>8g}{e2e}"
        )
    lines.append("SLO attainment since the router started:")
    if not status.pools:
        lines.append("  no answered requests yet")
    for pool in status.pools:
        attained = pool.attainment
        shown = "-" if attained is None else f"{attained:.1%}"
        missed = ", ".join(
            f"{name} {count:g}"
            for name, count in sorted(pool.counts.items())
            if name != SloOutcome.MET.value and count
        )
        lines.append(
            f"  {pool.priority:<14}{pool.pool:<20}{pool.generation:<8}{shown:>8} of"
            f" {pool.answered:g}{'  (' + missed + ')' if missed else ''}"
        )
    return "\n".join(lines)
