"""`ethtool -S` parsing and readers: files for tests, the binary on hosts, nothing when absent."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from orchestrator.exporters.ethtool import (
    CommandEthtoolReader,
    FileEthtoolReader,
    parse_ethtool_stats,
)
from orchestrator.exporters.roce import parse_rate_bytes_per_s, parse_state
from orchestrator.exporters.sysfs import MalformedFile

MLX5_OUTPUT = """NIC statistics:
     rx_packets: 12
     tx_prio3_pause: 7
     rx_prio3_pause_duration: 1500000
"""


def test_parse_reads_key_value_lines_after_the_header() -> None:
    assert parse_ethtool_stats(MLX5_OUTPUT, "x") == {
        "rx_packets": 12,
        "tx_prio3_pause": 7,
        "rx_prio3_pause_duration": 1_500_000,
    }


@pytest.mark.parametrize("line", ["     rx_prio3_pause: lots", "garbage", "     [0] tx: 5"])
def test_parse_rejects_lines_that_are_not_key_integer(line: str) -> None:
    with pytest.raises(MalformedFile, match="line 2"):
        parse_ethtool_stats(f"NIC statistics:\n{line}\n", "ethtool -S enp68s0")


def test_file_reader_returns_none_for_an_unknown_netdev(tmp_path: Path) -> None:
    (tmp_path / "enp68s0.txt").write_text(MLX5_OUTPUT)
    reader = FileEthtoolReader(tmp_path)
    assert reader.stats("enp68s0") == parse_ethtool_stats(MLX5_OUTPUT, "x")
    assert reader.stats("enp132s0") is None


def test_command_reader_runs_the_binary_and_treats_a_failure_as_no_data(tmp_path: Path) -> None:
    """A stand-in `ethtool` at the process edge: prints a netdev's statistics or fails."""
    (tmp_path / "enp68s0.txt").write_text(MLX5_OUTPUT)
    script = tmp_path / "ethtool"
    script.write_text(
        f'#!/bin/sh\nstats="{tmp_path}/$2.txt"\n'
        '[ "$1" = "-S" ] && [ -f "$stats" ] && exec cat "$stats"\n'
        'echo "Cannot get stats information: No such device" >&2\nexit 94\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    reader = CommandEthtoolReader(binary=str(script))
    assert reader.stats("enp68s0") == {
        "rx_packets": 12,
        "tx_prio3_pause": 7,
        "rx_prio3_pause_duration": 1_500_000,
    }
    assert reader.stats("eth9") is None


def test_command_reader_without_the_binary_has_no_data() -> None:
    assert CommandEthtoolReader(binary="no-such-ethtool-binary").stats("enp68s0") is None


@pytest.mark.parametrize(
    ("text", "bytes_per_s"),
    [
        ("100 Gb/sec (4X EDR)", 12.5e9),
        ("400 Gb/sec (4X NDR)", 50e9),
        ("2.5 Gb/sec (1X SDR)", 312.5e6),
        ("25 Gb/sec (1X EDR)", 3.125e9),
    ],
)
def test_rate_text_becomes_bytes_per_second(text: str, bytes_per_s: float) -> None:
    assert parse_rate_bytes_per_s(text, "rate") == bytes_per_s


@pytest.mark.parametrize("text", ["fast", "100 Mb/sec", ""])
def test_unreadable_rate_is_malformed(text: str) -> None:
    with pytest.raises(MalformedFile, match="rate"):
        parse_rate_bytes_per_s(text, "ports/1/rate")


def test_state_text_is_an_id_and_a_name() -> None:
    assert parse_state("4: ACTIVE", "state") == (4, "ACTIVE")
    assert parse_state("5: LinkUp", "phys_state") == (5, "LinkUp")
    with pytest.raises(MalformedFile):
        parse_state("ACTIVE", "state")
