"""The decision-cost benchmark runs (its figures are printed, not asserted: timing is noisy)."""

from __future__ import annotations

import pytest

from orchestrator.bench import decision_cost


def test_decision_cost_bench_prints_both_fleet_sizes_and_their_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert decision_cost.main(["--iterations", "20", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()[1:3]]
    assert [row[0] for row in rows] == ["8", "512"]
    assert all(float(row[1]) > 0 for row in rows)
    assert "ratio 512/8:" in out


def test_decision_cost_bench_explains_itself() -> None:
    with pytest.raises(SystemExit) as exited:
        decision_cost.main(["--help"])
    assert exited.value.code == 0
