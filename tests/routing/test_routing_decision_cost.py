"""The decision-cost benchmark runs (its figures are printed, not asserted: timing is noisy)."""

from __future__ import annotations

import random

import pytest

from orchestrator.bench import decision_cost
from orchestrator.fleet.figures import load_figures


@pytest.mark.parametrize("reserved", [[], ["--reserved"]])
def test_decision_cost_bench_prints_both_fleet_sizes_and_their_ratio(
    reserved: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert decision_cost.main(["--iterations", "20", "--repeats", "1", *reserved]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()[1:3]]
    assert [row[0] for row in rows] == ["8", "512"]
    assert all(float(row[1]) > 0 for row in rows)
    assert "ratio 512/8:" in out


def test_decision_cost_bench_explains_itself() -> None:
    with pytest.raises(SystemExit) as exited:
        decision_cost.main(["--help"])
    assert exited.value.code == 0


def test_the_reserved_case_holds_replicas_for_the_requests_target() -> None:
    target = load_figures().workload.server_latency_p99.tpot_s
    table = decision_cost.build_table(64)
    fleet, candidates = decision_cost.loaded_fleet(table, target, random.Random(0), reserved=True)
    assert fleet.reservation.tpot_s == target
    held = [c for c in candidates if c.stats.reserved_tpot_s == target]
    assert 0 < len(held) < len(candidates)
