"""Each fixture node's exposition matches its golden file, which the real `promtool` accepts,
and together the fixtures show every metric the exporter defines."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from exporter_fixtures import NODES, NodeFixture, exporter_for, exposition

from orchestrator.exporters.names import COMMON_LABELS, METRICS
from orchestrator.exporters.server import build_exporter

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")
REGENERATE = "python tests/exporters/exporter_fixtures.py"


def promtool_check_metrics(text: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize("fixture", NODES, ids=lambda f: f.driver)
def test_exposition_matches_the_golden_file(fixture: NodeFixture) -> None:
    assert exposition(exporter_for(fixture)) == fixture.golden.read_text(), (
        f"{fixture.golden} is stale; after a deliberate change run: {REGENERATE}"
    )


@needs_promtool
@pytest.mark.parametrize("fixture", NODES, ids=lambda f: f.driver)
def test_promtool_accepts_the_golden_file(fixture: NodeFixture) -> None:
    checked = promtool_check_metrics(fixture.golden.read_text())
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout + checked.stderr == ""  # no lint warnings either


@needs_promtool
def test_promtool_rejects_a_broken_exposition() -> None:
    """The check above can fail: a counter without `_total` and a bad sample are rejected."""
    broken = '# HELP x A counter.\n# TYPE x counter\nx{a="1"} not-a-number\n'
    assert promtool_check_metrics(broken).returncode != 0


def test_the_fixtures_show_every_defined_metric_with_node_and_site() -> None:
    shown: set[str] = set()
    for fixture in NODES:
        for line in fixture.golden.read_text().splitlines():
            if line.startswith("# TYPE "):
                shown.add(line.split()[2])
            elif line and not line.startswith("#"):
                labels = line[line.index("{") + 1 : line.index("}")]
                assert all(f'{label}="' in labels for label in COMMON_LABELS), line
    assert set(METRICS) <= shown


def test_an_empty_root_exports_only_the_exporters_own_metrics(tmp_path: Path) -> None:
    text = exposition(build_exporter(tmp_path, node="n", site="s", ethtool_dir=tmp_path))
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert {line.split("{")[0] for line in samples} == {
        "orchestrator_exporter_errors_total",
        "orchestrator_exporter_scrape_duration_seconds",
    }
