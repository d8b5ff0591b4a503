"""The report of one LoadGen run: LoadGen's summary (parsed) plus our own per-query view.

tokens/s comes from LoadGen's summary when it printed one, else from our count over the run;
TTFT and TPOT percentiles are ours (nearest rank, as LoadGen), from the streams' timestamps;
pool shares from the replica each stream names. Writes report.json and report.png.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.bench.loadgen.dataset import Dataset
from orchestrator.bench.loadgen.sut import Progress
from orchestrator.sim.virtual import percentile

if TYPE_CHECKING:
    from orchestrator.bench.loadgen.run import LoadgenSettings

SUMMARY_FILE = "mlperf_log_summary.txt"


def parse_summary(text: str) -> dict[str, str]:
    """`key : value` lines of LoadGen's summary, keys as printed."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and value.strip():
            out.setdefault(key.strip(), value.strip())
    return out


def summary_number(summary: Mapping[str, str], pattern: str) -> float | None:
    """The first summary value whose key matches `pattern` (a regex), as a number."""
    for key, value in summary.items():
        if re.search(pattern, key, re.IGNORECASE):
            try:
                return float(value)
            except ValueError:
                continue
    return None


@dataclass(frozen=True, slots=True)
class Report:
    scenario: str
    transport: str
    endpoint: str
    time_scale: float
    result: str  # VALID or INVALID, LoadGen's verdict
    tokens_per_s: float
    tokens_per_s_unscaled: float  # what the hardware would do: wall tokens/s × time scale
    queries: int
    failed: int
    first_error: str | None
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    ttft_limit_s: float
    tpot_limit_s: float
    pool_shares: dict[str, float]
    dataset_mean_input_tokens: float
    dataset_mean_output_tokens: float
    elapsed_s: float
    summary: dict[str, str]

    @property
    def within_limits(self) -> bool:
        return self.ttft_p99_s <= self.ttft_limit_s and self.tpot_p99_s <= self.tpot_limit_s


def _shares(progress: Progress) -> dict[str, float]:
    tokens: dict[str, int] = {}
    for outcome in progress.outcomes:
        key = outcome.pool or outcome.replica or "unknown"
        tokens[key] = tokens.get(key, 0) + outcome.output_tokens
    total = sum(tokens.values())
    return {k: v / total for k, v in sorted(tokens.items())} if total else {}


def build_report(
    settings: LoadgenSettings, dataset: Dataset, progress: Progress, elapsed_s: float, out: Path
) -> Report:
    summary_path = out / SUMMARY_FILE
    summary = parse_summary(summary_path.read_text()) if summary_path.exists() else {}
    outcomes = progress.outcomes
    ttfts = [o.first_token_s - o.sent_s for o in outcomes if o.first_token_s is not None]
    tpots = [
        (o.done_s - o.first_token_s) / (o.output_tokens - 1)
        for o in outcomes
        if o.first_token_s is not None and o.output_tokens > 1 and o.error is None
    ]
    measured = summary_number(summary, r"tokens per second")
    tokens_per_s = measured if measured else progress.output_tokens / max(elapsed_s, 1e-9)
    result = summary.get("Result is", "INVALID" if not summary else "UNKNOWN")
    report = Report(
        scenario=settings.scenario, transport=settings.transport, endpoint=settings.endpoint,
        time_scale=settings.time_scale, result=result, tokens_per_s=tokens_per_s,
        tokens_per_s_unscaled=tokens_per_s * settings.time_scale, queries=len(outcomes),
        failed=progress.failed,
        first_error=next((o.error for o in outcomes if o.error is not None), None),
        ttft_p50_s=percentile(ttfts, 50), ttft_p99_s=percentile(ttfts, 99),
        tpot_p50_s=percentile(tpots, 50), tpot_p99_s=percentile(tpots, 99),
        ttft_limit_s=settings.ttft_limit_s, tpot_limit_s=settings.tpot_limit_s,
        pool_shares=_shares(progress), dataset_mean_input_tokens=dataset.mean_input_tokens(),
        dataset_mean_output_tokens=dataset.mean_output_tokens(), elapsed_s=elapsed_s,
        summary=summary,
    )  # fmt: skip
    (out / "report.json").write_text(json.dumps(asdict(report), indent=2, default=str))
    plot_report(report, out / "report.png", ttfts, tpots)
    return report


def plot_report(report: Report, path: Path, ttfts: Sequence[float], tpots: Sequence[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for axis, values, limit, name in (
        (axes[0], ttfts, report.ttft_limit_s, "TTFT (s)"),
        (axes[1], tpots, report.tpot_limit_s, "TPOT (s)"),
    ):
        if values:
            axis.hist(values, bins=30, color="#4477aa")
        axis.axvline(limit, color="#cc3311", linestyle="--", label="p99 limit")
        axis.set_xlabel(name)
        axis.legend()
    shares = report.pool_shares
    axes[2].bar(list(shares), list(shares.values()), color="#228833")
    axes[2].set_ylabel("share of output tokens")
    axes[2].tick_params(axis="x", rotation=30)
    figure.suptitle(
        f"LoadGen {report.scenario} over {report.transport}: {report.tokens_per_s:,.0f} tok/s, "
        f"{report.result}"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def format_report(report: Report) -> str:
    lines = [
        f"LoadGen {report.scenario} over {report.transport} ({report.endpoint}), "
        f"time scale {report.time_scale:g}: {report.result}",
        f"  tokens/s       {report.tokens_per_s:,.1f} (x time scale: "
        f"{report.tokens_per_s_unscaled:,.1f})",
        f"  queries        {report.queries} ({report.failed} failed"
        + (f"; first error: {report.first_error}" if report.first_error else "")
        + ")",
        f"  TTFT p50/p99   {report.ttft_p50_s:.3f} / {report.ttft_p99_s:.3f} s "
        f"(limit {report.ttft_limit_s:.3f} s)",
        f"  TPOT p50/p99   {report.tpot_p50_s * 1e3:.1f} / {report.tpot_p99_s * 1e3:.1f} ms "
        f"(limit {report.tpot_limit_s * 1e3:.1f} ms)",
        "  pool shares    " + ", ".join(f"{k} {v:.1%}" for k, v in report.pool_shares.items()),
    ]
    return "\n".join(lines)
