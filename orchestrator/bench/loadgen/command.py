"""`orchestrator bench loadgen`: MLCommons LoadGen, Offline or Server, against one endpoint.

Its arguments parse without the `bench` extra; LoadGen itself is imported only when the command
runs, so `--help` works everywhere and a missing extra is reported by the CLI in one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Final

SCENARIOS: Final = ("Offline", "Server")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(text)


def _scenario(text: str) -> str:
    for name in SCENARIOS:
        if text.lower() == name.lower():
            return name
    raise argparse.ArgumentTypeError(f"expected Offline or Server, got {text!r}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--endpoint", required=True,
        help="router URL (http://host:port) or, with --transport grpc, host:port",
    )  # fmt: skip
    parser.add_argument("--scenario", type=_scenario, required=True, help="Offline or Server")
    parser.add_argument("--target-qps", type=_positive, default=1.0, help="queries/s (default 1)")
    parser.add_argument("--duration", type=_positive, default=60.0, help="seconds (default 60)")
    parser.add_argument("--transport", choices=("http", "grpc"), default="http")
    parser.add_argument(
        "--time-scale", type=_positive, default=1.0,
        help="the stack's time scale: latency limits are multiplied by it (default 1)",
    )  # fmt: skip
    parser.add_argument("--samples", type=_count, default=512, help="dataset size (default 512)")
    parser.add_argument(
        "--max-output-tokens", type=_count, default=None,
        help="cap output lengths below the workload's maximum (short runs)",
    )  # fmt: skip
    parser.add_argument(
        "--max-in-flight", type=_count, default=256,
        help="Offline: streams kept open at once (default 256)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("loadgen-out"), help="output folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from orchestrator.bench.loadgen.report import format_report
    from orchestrator.bench.loadgen.run import LoadgenSettings, run_loadgen

    settings = LoadgenSettings(
        endpoint=args.endpoint, scenario=args.scenario, target_qps=args.target_qps,
        duration_s=args.duration, transport=args.transport, time_scale=args.time_scale,
        samples=args.samples, seed=args.seed, max_output_tokens=args.max_output_tokens,
        max_in_flight=args.max_in_flight, out_dir=args.out,
    )  # fmt: skip
    report = run_loadgen(settings)
    print(format_report(report))
    print(f"LoadGen logs, report.json and report.png in {args.out}")
    return 0 if report.queries and not report.failed else 1
