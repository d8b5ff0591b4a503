"""The router's overload flags: admission control, priorities, slow-reader cap."""

from __future__ import annotations

import argparse

from orchestrator.admission.settings import (
    DEFAULT_BATCH_RESERVE,
    DEFAULT_CAPACITY_FACTOR,
    DEFAULT_MAX_QUEUE,
    DEFAULT_QUEUE_TIMEOUT_S,
    AdmissionSettings,
)
from orchestrator.core.arg_types import non_negative_float as _non_negative_float
from orchestrator.core.arg_types import non_negative_int as _non_negative_int
from orchestrator.core.arg_types import positive_float
from orchestrator.frontends.http.app import DEFAULT_STREAM_BUFFER_BYTES
from orchestrator.routing.context import Priority


def _share(raw: str) -> float:
    value = _non_negative_float(raw)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value}")
    return value


def add_flags(router: argparse.ArgumentParser) -> None:
    """Add the admission and slow-reader flags to `orchestrator router`."""
    router.add_argument(
        "--admission", choices=("on", "off"), default="on",
        help="admit requests against the fleet's estimated capacity, refusing with 429 what"
        " cannot be served within the queue timeout (default on)",
    )  # fmt: skip
    router.add_argument(
        "--max-queue", type=_non_negative_int, default=DEFAULT_MAX_QUEUE,
        help=f"requests that may wait for admission (default {DEFAULT_MAX_QUEUE})",
    )  # fmt: skip
    router.add_argument(
        "--queue-timeout", type=_non_negative_float, default=DEFAULT_QUEUE_TIMEOUT_S,
        help="seconds a request may wait for admission, times --latency-scale"
        f" (default {DEFAULT_QUEUE_TIMEOUT_S})",
    )  # fmt: skip
    router.add_argument(
        "--batch-reserve", type=_share, default=DEFAULT_BATCH_RESERVE,
        help="share of the capacity batch requests leave to interactive ones"
        f" (default {DEFAULT_BATCH_RESERVE})",
    )  # fmt: skip
    router.add_argument(
        "--capacity-factor", type=positive_float, default=DEFAULT_CAPACITY_FACTOR,
        help="admit up to this multiple of the fleet's estimated capacity within the targets"
        f" (default {DEFAULT_CAPACITY_FACTOR:g})",
    )  # fmt: skip
    router.add_argument(
        "--default-priority", choices=[p.value for p in Priority],
        default=Priority.INTERACTIVE.value,
        help="class of a request that names none (default interactive)",
    )  # fmt: skip
    router.add_argument(
        "--stream-buffer-bytes", type=int, default=DEFAULT_STREAM_BUFFER_BYTES,
        help="a client this many bytes behind a stream has it cut (default 1 MiB)",
    )  # fmt: skip


def admission_settings(args: argparse.Namespace) -> AdmissionSettings:
    return AdmissionSettings(
        enabled=args.admission == "on",
        max_queue=args.max_queue,
        queue_timeout_s=args.queue_timeout,
        batch_reserve=args.batch_reserve,
        capacity_factor=args.capacity_factor,
        default_priority=Priority(args.default_priority),
    )
