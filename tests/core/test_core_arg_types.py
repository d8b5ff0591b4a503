"""The one module of command-line argument types: a bad value is argparse's usage error naming
the flag (exit 2), for the `cli` families and the benchmarks' own entries alike."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import pytest

from orchestrator.bench import fleet_scale
from orchestrator.core import arg_types
from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.core.generations import Generation, parse_generation


@pytest.mark.parametrize(
    ("parse", "raw", "value"),
    [(arg_types.port, "0", 0), (arg_types.positive_int, "3", 3),
     (arg_types.non_negative_int, "0", 0), (arg_types.positive_float, "0.5", 0.5),
     (arg_types.non_negative_float, "0", 0.0), (arg_types.seconds, "2.5", 2.5),
     (arg_types.positive_ints, "8, 128,512", (8, 128, 512)),
     (arg_types.positive_floats, "2,4.5", (2.0, 4.5)),
     (arg_types.one_of(("Offline", "Server")), "server", "Server"),
     (arg_types.from_parser(parse_generation), "mi300x", Generation.MI300X)],
)  # fmt: skip
def test_a_good_value_is_converted(parse: Callable[[str], Any], raw: str, value: Any) -> None:
    assert parse(raw) == value


@pytest.mark.parametrize(
    ("parse", "raw", "says"),
    [(arg_types.port, "65536", "0..65535"), (arg_types.port, "http", "not a port number"),
     (arg_types.positive_int, "0", ">= 1"), (arg_types.non_negative_int, "-1", ">= 0"),
     (arg_types.positive_float, "0", "> 0"), (arg_types.positive_float, "nan", "finite"),
     (arg_types.positive_float, "inf", "finite"), (arg_types.non_negative_float, "-0.1", ">= 0"),
     (arg_types.seconds, "soon", "must be a number of seconds"),
     (arg_types.seconds, "0", "must be > 0 seconds"),
     (arg_types.positive_ints, "8,x", "comma-separated whole numbers >= 1"),
     (arg_types.positive_ints, ",", "comma-separated"),
     (arg_types.positive_floats, "2,-1", "finite numbers > 0"),
     (arg_types.one_of(("Offline", "Server")), "both", "expected Offline or Server")],
)  # fmt: skip
def test_a_bad_value_is_a_usage_error_saying_what_is_wanted(
    parse: Callable[[str], Any], raw: str, says: str
) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=says.replace("(", r"\(")):
        parse(raw)


def test_a_parsers_error_is_its_message_without_the_flag_argparse_names_anyway() -> None:
    def offer(raw: str) -> str:
        raise OrchestratorError(ErrorCode.INVALID_ARGUMENT, f"--offer: no price in {raw!r}")

    with pytest.raises(argparse.ArgumentTypeError) as caught:
        arg_types.from_parser(offer)("MI300X")
    assert str(caught.value) == "no price in 'MI300X'"


def test_a_benchmarks_own_entry_refuses_a_bad_value_with_exit_2_naming_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        fleet_scale.main(["--replicas", "8,0"])
    assert exit_info.value.code == 2
    assert "--replicas: expected comma-separated whole numbers >= 1, got '8,0'" in (
        capsys.readouterr().err
    )
