"""`orchestrator bench loadgen`: MLCommons LoadGen, Offline or Server, against one endpoint.

Its arguments parse without the `bench` extra; LoadGen itself is imported only when the command
runs, so `--help` works everywhere and a missing extra is reported by the CLI in one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Final

from orchestrator.core.arg_types import one_of, positive_float, positive_int, seconds

SCENARIOS: Final = ("Offline", "Server")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--endpoint", required=True,
        help="router URL (http://host:port) or, with --transport grpc, host:port",
    )  # fmt: skip
    parser.add_argument(
        "--scenario", type=one_of(SCENARIOS), required=True, help="Offline or Server"
    )
    parser.add_argument(
        "--target-qps", type=positive_float, default=1.0, help="queries/s (default 1)"
    )
    parser.add_argument("--duration", type=seconds, default=60.0, help="seconds (default 60)")
    parser.add_argument("--transport", choices=("http", "grpc"), default="http")
    parser.add_argument(
        "--time-scale", type=positive_float, default=1.0,
        help="the stack's time scale: latency limits are multiplied by it (default 1)",
    )  # fmt: skip
    parser.add_argument(
        "--samples", type=positive_int, default=512, help="dataset size (default 512)"
    )
    parser.add_argument(
        "--max-output-tokens", type=positive_int, default=None,
        help="cap output lengths below the workload's maximum (short runs)",
    )  # fmt: skip
    parser.add_argument(
        "--max-in-flight", type=positive_int, default=256,
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
