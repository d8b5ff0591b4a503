"""Command-line argument types: each turns a bad value into argparse's own usage error (exit 2,
the flag named) instead of a traceback.

Shared by every command line we have, the `cli/` families and the benchmarks' own
`python -m orchestrator.bench...` entries alike, so it sits in `core/` below both. Numbers must
be finite: NaN and infinity are refused wherever a bound is checked.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable
from typing import TypeVar

from orchestrator.core.errors import OrchestratorError

T = TypeVar("T")


def port(raw: str) -> int:
    """A TCP port; 0 asks the system for a free one."""
    value = _int(raw, "not a port number")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in 0..65535, got {value}")
    return value


def non_negative_int(raw: str) -> int:
    value = _int(raw, "not an integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_int(raw: str) -> int:
    value = _int(raw, "not an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_float(raw: str) -> float:
    value = _float(raw, "not a number")
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {raw}")
    return value


def positive_float(raw: str) -> float:
    value = _float(raw, "not a number")
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {raw}")
    return value


def seconds(raw: str) -> float:
    """A duration: a finite number of seconds > 0."""
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {raw!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds and finite, got {raw}")
    return value


def positive_ints(raw: str) -> tuple[int, ...]:
    """Comma-separated whole numbers >= 1 (fleet sizes, say): `8,128,512`."""
    return _list(raw, positive_int, "whole numbers >= 1")


def positive_floats(raw: str) -> tuple[float, ...]:
    """Comma-separated finite numbers > 0 (request rates, say): `2,4,6`."""
    return _list(raw, positive_float, "finite numbers > 0")


def one_of(names: Iterable[str]) -> Callable[[str], str]:
    """One of `names`, in any case; the value is the name as `names` spells it."""
    known = tuple(names)

    def choice(raw: str) -> str:
        for name in known:
            if raw.lower() == name.lower():
                return name
        raise argparse.ArgumentTypeError(f"expected {' or '.join(known)}, got {raw!r}")

    choice.__name__ = "choice"
    return choice


def from_parser(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argument type from a parser raising `OrchestratorError` (a generation, an offer...):
    its message becomes the usage error, less a leading `--flag: ` argparse adds anyway."""

    def convert(raw: str) -> T:
        try:
            return parse(raw)
        except OrchestratorError as error:
            message = error.message
            if message.startswith("--"):
                message = message.split(": ", 1)[-1]
            raise argparse.ArgumentTypeError(message) from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def _int(raw: str, what: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: {raw!r}") from None


def _float(raw: str, what: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: {raw!r}") from None


def _list(raw: str, item: Callable[[str], T], what: str) -> tuple[T, ...]:
    parts = [part.strip() for part in raw.split(",") if part.strip()]
    try:
        values = tuple(item(part) for part in parts)
    except argparse.ArgumentTypeError:
        values = ()
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {raw!r}")
    return values
