"""The scrape benchmark builds its 8-GPU, 8-NIC node and reports figures (no timing asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.bench import exporter_scrape
from orchestrator.exporters import names as n
from orchestrator.exporters.server import build_exporter


def test_the_benchmark_node_has_eight_gpus_and_eight_nics(tmp_path: Path) -> None:
    exporter_scrape.build_node(tmp_path)
    scrape = build_exporter(tmp_path, node="b", site="s", ethtool_dir=tmp_path / "ethtool").scrape()
    assert sum(s.metric == n.GPU_HBM_USED for s in scrape.samples) == exporter_scrape.GPUS
    assert sum(s.metric == n.RDMA_PORT_STATE for s in scrape.samples) == exporter_scrape.NICS
    assert sum(s.metric == n.NIC_PFC_PAUSE_DURATION for s in scrape.samples) == 8 * 8 * 2
    assert scrape.errors_total == {"roce": 0, "hbm": 0, "versions": 0}


def test_the_benchmark_prints_median_and_p99(capsys: pytest.CaptureFixture[str]) -> None:
    assert exporter_scrape.main(["--iterations", "3"]) == 0
    out = capsys.readouterr().out
    assert "8 GPUs + 8 mlx5 NICs" in out
    assert "median" in out and "p99" in out and "over 3 scrapes" in out


def test_the_benchmark_rejects_zero_iterations() -> None:
    with pytest.raises(SystemExit) as exit_info:
        exporter_scrape.main(["--iterations", "0"])
    assert exit_info.value.code == 2
