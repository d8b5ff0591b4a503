"""The benchmarks stay runnable: each entry point answers --help, and the cheap ones run."""

from __future__ import annotations

import pytest

from orchestrator.bench import router_overhead, virtual_speed
from orchestrator.core.generations import Generation


@pytest.mark.parametrize("module", [router_overhead, virtual_speed])
def test_every_benchmark_explains_itself(
    module: object, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])  # type: ignore[attr-defined]
    assert exit_info.value.code == 0
    assert "usage" in capsys.readouterr().out


def test_virtual_speed_runs_a_replica_through_a_short_server_scenario() -> None:
    result = virtual_speed.measure(Generation.MI300X, minutes=0.5)
    assert result.requests > 10
    assert result.simulated_s >= 30
    assert result.ttft_p99_s > 0 and result.tpot_p99_s > 0


def test_router_overhead_table_reports_what_each_router_adds_over_direct() -> None:
    direct = router_overhead.Measurement("direct", 1000.0, 16000.0, 0.10, 0.20, 0.05)
    routed = router_overhead.Measurement("ours", 500.0, 8000.0, 0.40, 0.90, 0.35)
    table = router_overhead.format_table([direct, routed])
    row = next(line for line in table.splitlines() if line.startswith("ours"))
    assert row.split()[1:] == ["500", "8,000", "0.40", "0.90", "0.30", "0.70", "0.35", "0.30"]
