"""The router-books benchmark runs (its figures are printed, not asserted: timing is noisy)."""

from __future__ import annotations

import pytest

from orchestrator.bench import router_books


def test_router_books_bench_prints_each_part_per_fleet_size(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--replicas", "8,64", "--requests", "200", "--rate", "1000", "--repeats", "1"]
    assert router_books.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["replicas", *router_books.PARTS, "total"]
    rows = [line.split() for line in out[1:3]]
    assert [row[0] for row in rows] == ["8", "64"]
    assert all(float(value) >= 0 for row in rows for value in row[1:])
    assert "total 64/8:" in out[3]
