"""Print and persist calibration results: a table for people, JSON for tools, the YAML block."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.core.generations import Generation
from orchestrator.fleet.figures import load_figures
from orchestrator.sim.calibration import GenerationCalibration

_COLUMNS = (
    ("generation", 10),
    ("efficiency", 10),
    ("offline tok/s", 13),
    ("MLPerf", 8),
    ("err", 7),
    ("server tok/s", 12),
    ("MLPerf", 8),
    ("err", 7),
    ("p99 TTFT", 9),
    ("p99 TPOT", 9),
    ("KV tokens", 10),
    ("batch", 6),
)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def capacity_ratio(
    results: Sequence[GenerationCalibration], fast: Generation, slow: Generation
) -> float | None:
    """Predicted Server capacity of `fast` over `slow`, per GPU (None if either is missing)."""
    by_generation = {r.generation: r for r in results}
    if fast not in by_generation or slow not in by_generation:
        return None
    return by_generation[fast].server.tokens_per_s / by_generation[slow].server.tokens_per_s


def format_table(results: Sequence[GenerationCalibration]) -> str:
    header = "  ".join(name.rjust(width) for name, width in _COLUMNS)
    lines = [header, "-" * len(header)]
    for r in results:
        cells = (
            r.generation.value,
            f"{r.sequence_efficiency:.4f}",
            _num(r.offline.saturated_tokens_per_s),
            _num(r.measured_offline_tokens_per_s),
            _pct(r.offline_error_pct),
            _num(r.server.tokens_per_s),
            _num(r.measured_server_tokens_per_s),
            _pct(r.server_error_pct),
            f"{r.server.ttft_p99_s:.2f}s",
            f"{r.server.tpot_p99_s * 1000:.1f}ms",
            _num(r.kv_capacity_tokens),
            f"{r.offline.saturation_batch:.0f}",
        )
        lines.append(
            "  ".join(cell.rjust(width) for cell, (_, width) in zip(cells, _COLUMNS, strict=True))
        )
    lines.append("")
    lines.append(
        "Per GPU. offline = saturated Offline throughput (calibrated); server = highest Poisson "
        "rate with p99 TTFT <= 3 s and p99 TPOT <= 80 ms (predicted, not fitted); batch = "
        "sequences per step at saturation."
    )
    relative = load_figures().relative
    for r in results:
        if r.generation in relative:
            anchor = relative[r.generation]
            lines.append(
                f"{r.generation.value}: no MLPerf row; its Offline target is "
                f"{anchor.ratio:.2f} × {anchor.reference.value}'s published figure (`relative:`)."
            )
    ratio = capacity_ratio(results, Generation.MI355X, Generation.MI300X)
    if ratio is not None:
        offline = {r.generation: r.offline.saturated_tokens_per_s for r in results}
        lines.append(
            f"MI355X : MI300X capacity ratio: {ratio:.2f} (Server, predicted); "
            f"{offline[Generation.MI355X] / offline[Generation.MI300X]:.2f} (Offline)"
        )
    return "\n".join(lines)


def to_json(results: Sequence[GenerationCalibration]) -> dict[str, Any]:
    rows = []
    for r in results:
        rows.append(
            {
                "generation": r.generation.value,
                "sequence_efficiency": r.sequence_efficiency,
                "offline_tokens_per_s": r.offline.saturated_tokens_per_s,
                "offline_whole_run_tokens_per_s": r.offline.whole_run_tokens_per_s,
                "mlperf_offline_tokens_per_s": r.measured_offline_tokens_per_s,
                "offline_error_pct": r.offline_error_pct,
                "server_tokens_per_s": r.server.tokens_per_s,
                "server_rate_per_s": r.server.rate_per_s,
                "server_ttft_p99_s": r.server.ttft_p99_s,
                "server_tpot_p99_s": r.server.tpot_p99_s,
                "mlperf_server_tokens_per_s": r.measured_server_tokens_per_s,
                "server_error_pct": r.server_error_pct,
                "kv_capacity_tokens": r.kv_capacity_tokens,
                "saturation_batch": r.offline.saturation_batch,
                "offline_preemptions": r.offline.preemptions,
            }
        )
    return {
        "per_gpu": rows,
        "mi355x_to_mi300x_capacity_ratio": capacity_ratio(
            results, Generation.MI355X, Generation.MI300X
        ),
    }


def write_efficiencies(path: Path, efficiencies: dict[Generation, float]) -> None:
    """Rewrite `calibrated.sequence_efficiency` in place, keeping every comment."""
    write_calibrated_block(path, "sequence_efficiency", efficiencies, "{:.4f}")


def write_server_capacities(path: Path, capacities: dict[Generation, float]) -> None:
    """Rewrite `calibrated.server_tokens_per_s` (the router's capacity prior) in place."""
    write_calibrated_block(path, "server_tokens_per_s", capacities, "{:.0f}")


def write_calibrated_block(
    path: Path, block: str, values: dict[Generation, float], number_format: str
) -> None:
    """Replace the numbers of `calibrated.<block>` entries; every other byte stays as it was."""
    text = path.read_text()
    calibrated = text.index("calibrated:")
    start = text.index(f"  {block}:", calibrated)
    end_match = re.compile(r"^  \S", re.MULTILINE).search(text, start + 1)
    end = end_match.start() if end_match else len(text)
    section = text[start:end]
    for generation, value in values.items():
        pattern = re.compile(rf"^(\s+{generation.value}:\s*)[0-9.eE+-]+", re.MULTILINE)
        match = pattern.search(section)
        if match is None:
            raise ValueError(f"{path}: no calibrated.{block} entry for {generation.value}")
        number = number_format.format(value)
        section = section[: match.end(1)] + number + section[match.end() :]
    path.write_text(text[:start] + section + text[end:])
