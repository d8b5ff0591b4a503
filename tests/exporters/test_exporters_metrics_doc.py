"""docs/metrics.md is generated from the code and must not drift from it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from orchestrator.exporters.names import METRICS

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gen_metrics_doc.py"
DOC = REPO / "docs" / "metrics.md"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_metrics_doc", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_metrics_md_matches_the_code() -> None:
    assert DOC.read_text() == load_script().render(), (
        "docs/metrics.md is stale: run `python scripts/gen_metrics_doc.py` and commit it"
    )


def test_the_doc_names_every_exporter_and_router_metric_with_its_labels() -> None:
    text = load_script().render()
    for spec in METRICS.values():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{spec.name}` |"))
        assert all(f"`{label}`" in row for label in spec.labels), row
    assert "| `orchestrator_router_requests_total` | counter | `frontend`, `code` |" in text
    assert "`rx_prio0_pause_duration` … `rx_prio7_pause_duration`" in text


def test_check_mode_fails_on_a_stale_file(tmp_path: Path) -> None:
    checked = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == (0 if DOC.read_text() == load_script().render() else 1)
    module = load_script()
    module.DOC = tmp_path / "metrics.md"
    module.DOC.write_text("stale\n")
    assert module.main(["--check"]) == 1
    assert module.main([]) == 0
    assert module.main(["--check"]) == 0
