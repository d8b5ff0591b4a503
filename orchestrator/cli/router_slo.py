"""The router's latency-target flags: `--ttft`, `--tpot`, `--e2e` and `--class-slo`.

They override the fleet-wide values of the replicas file's `slo:` section (config/slo.py); a
router following the control plane has only these.
"""

from __future__ import annotations

import argparse

from orchestrator.config.slo import parse_class_slo
from orchestrator.core.arg_types import seconds
from orchestrator.core.slo import MLPERF_TPOT_S, MLPERF_TTFT_S, SloTarget, SloTargets


def _class_slo(raw: str) -> tuple[str, SloTarget]:
    try:
        return parse_class_slo(raw)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_flags(router: argparse.ArgumentParser) -> None:
    """Add the latency-target flags to `orchestrator router`."""
    router.add_argument(
        "--ttft", type=seconds, default=None, metavar="SECONDS",
        help="p99 time-to-first-token target of every class without its own, in seconds on real"
        f" hardware (default: the replicas file's, else MLPerf's {MLPERF_TTFT_S:g})",
    )  # fmt: skip
    router.add_argument(
        "--tpot", type=seconds, default=None, metavar="SECONDS",
        help="p99 time-per-output-token target of every class without its own"
        f" (default: the replicas file's, else MLPerf's {MLPERF_TPOT_S:g})",
    )  # fmt: skip
    router.add_argument(
        "--e2e", type=seconds, default=None, metavar="SECONDS",
        help="end-to-end target of every class without its own (default: the file's, else none)",
    )  # fmt: skip
    router.add_argument(
        "--class-slo", type=_class_slo, action="append", default=[],
        metavar="NAME=TTFT/TPOT[/E2E]",
        help="targets of one request class, e.g. batch=30/0.2 (repeatable)",
    )  # fmt: skip


def targets(args: argparse.Namespace, base: SloTargets | None = None) -> SloTargets:
    """`base` (the replicas file's targets, or MLPerf's) with the flags applied over it."""
    found = (base or SloTargets()).with_default(args.ttft, args.tpot)
    if args.e2e is not None:
        default = found.default
        found = SloTargets(
            SloTarget(default.ttft_s, default.tpot_s, args.e2e), found.classes, found.models
        )
    return found.with_classes(dict(args.class_slo))
