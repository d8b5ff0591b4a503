"""`python -m orchestrator.bench.overload`: the runs, their tables and the command line."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestrator.bench import overload
from orchestrator.bench.overload.fleet import LoadSpec, UniformFleet
from orchestrator.bench.overload.load import run_once, settle
from orchestrator.bench.overload.outcomes import RunResult, percentile
from orchestrator.bench.overload.processes import running_fleet
from orchestrator.core.arg_types import (
    from_parser,
    non_negative_float,
    positive_float,
    positive_int,
    seconds,
)
from orchestrator.core.generations import Generation, parse_generation


def overload_table(runs: Sequence[RunResult]) -> str:
    fleet = runs[0].fleet
    rows: list[tuple[str, Callable[[RunResult], str]]] = [
        ("offered requests", lambda r: f"{len(r.outcomes)}"),
        ("admitted (200)", lambda r: f"{len(r.admitted())}"),
        ("refused (429)", lambda r: f"{len(r.refused())}"),
        (
            "other / no answer",
            lambda r: f"{len(r.outcomes) - len(r.admitted()) - len(r.refused())}",
        ),
        ("unfinished at drain", lambda r: f"{sum(1 for o in r.admitted() if not o.finished)}"),
        ("admitted p50 TTFT s", lambda r: _fmt(percentile(_ttfts(r), 50))),
        ("admitted p99 TTFT s", lambda r: _fmt(r.ttft_p99_s())),
        ("TTFT target s", lambda r: _fmt(fleet.target_ttft_s)),
        ("429 p50 ms", lambda r: _fmt(r.refused_ms(50), 1)),
        ("429 p99 ms", lambda r: _fmt(r.refused_ms(99), 1)),
        ("goodput tok/s", lambda r: _fmt(r.goodput_tokens, 1)),
        ("fleet capacity tok/s", lambda r: _fmt(fleet.capacity_tokens, 1)),
        ("goodput / capacity", lambda r: f"{100 * r.goodput_share:.0f}%"),
        ("router RSS MiB @25%", lambda r: _fmt(r.rss_at(0.25), 1)),
        ("router RSS MiB end", lambda r: _fmt(r.rss_at(1.0), 1)),
        ("router RSS MiB max", lambda r: _fmt(max((s for _, s in r.rss_mib), default=math.nan), 1)),
    ]
    return _table(
        ["", *(r.name for r in runs)], [[label, *(f(r) for r in runs)] for label, f in rows]
    )


def priority_table(run: RunResult) -> str:
    target = run.fleet.target_ttft_s
    header = ["priority", "offered", "admitted", "refused", "p99 TTFT s", "target s", "good"]
    body = [
        [
            priority,
            str(len(run.of(priority))),
            str(len(run.admitted(priority))),
            str(len(run.refused(priority))),
            _fmt(run.ttft_p99_s(priority)),
            _fmt(target),
            str(len(run.good(priority))),
        ]
        for priority in ("interactive", "batch")
    ]
    return _table(header, body)


def _ttfts(run: RunResult) -> list[float]:
    return [o.ttft_s for o in run.admitted() if o.ttft_s is not None]


def _fmt(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(
            zip(row, widths, strict=True)))
        for row in (header, *rows)
    ]  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orchestrator.bench.overload",
        description=(overload.__doc__ or "").split("\n")[0],
    )
    parser.add_argument("--duration", type=seconds, default=60.0, help="seconds of load per run")
    parser.add_argument("--load", type=positive_float, default=3.0, help="offered load / capacity")
    parser.add_argument(
        "--priority-load", type=positive_float, default=2.0, help="same, priorities run"
    )
    parser.add_argument("--replicas", type=positive_int, default=2)
    parser.add_argument(
        "--generation", type=from_parser(parse_generation), default=Generation.MI300X
    )
    parser.add_argument("--time-scale", type=positive_float, default=2.0)
    parser.add_argument("--prompt-tokens", type=positive_int, default=2000)
    parser.add_argument("--output-tokens", type=positive_int, default=32)
    parser.add_argument(
        "--drain", type=non_negative_float, default=30.0, help="seconds to wait after load"
    )
    parser.add_argument("--skip-priorities", action="store_true")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    fleet = UniformFleet(
        args.replicas,
        args.generation,
        args.time_scale,
        args.prompt_tokens,
        args.output_tokens,
    )
    load = LoadSpec(args.load, args.duration, drain_s=args.drain)
    figures: dict[str, object] = {}
    with running_fleet(fleet) as urls:
        runs = []
        for name, admission in (("admission on", True), ("admission off", False)):
            print(f"running: {name} ({args.duration:.0f} s at {args.load}x)", file=sys.stderr)
            runs.append(run_once(name, fleet, urls, load, admission=admission))
            settle(urls)
        what = f"{fleet.replicas} x {fleet.generation.value}, time scale {fleet.time_scale}"
        print(f"Overload: {args.load}x the fleet's capacity for {args.duration:.0f} s ({what})")
        print(overload_table(runs))
        figures["overload"] = [_summary(run) for run in runs]
        if not args.skip_priorities:
            mixed = LoadSpec(args.priority_load, args.duration, 0.5, args.drain)
            print(f"running: priorities ({args.priority_load}x)", file=sys.stderr)
            run = run_once("priorities", fleet, urls, mixed, admission=True)
            print(f"\nPriorities: {args.priority_load}x, half the requests batch")
            print(priority_table(run))
            figures["priorities"] = _summary(run)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


def _summary(run: RunResult) -> dict[str, object]:
    return {
        "name": run.name,
        "offered": len(run.outcomes),
        "admitted": len(run.admitted()),
        "refused": len(run.refused()),
        "ttft_p99_s": run.ttft_p99_s(),
        "target_ttft_s": run.fleet.target_ttft_s,
        "refused_p99_ms": run.refused_ms(99),
        "goodput_share": run.goodput_share,
        "rss_mib": [run.rss_at(0.25), run.rss_at(1.0)],
        "by_priority": {
            p: {
                "admitted": len(run.admitted(p)),
                "refused": len(run.refused(p)),
                "ttft_p99_s": run.ttft_p99_s(p),
            }
            for p in ("interactive", "batch")
        },
    }
