"""Walk the Grafana dashboards of `dashboards/`: their panels' PromQL, with template variables
replaced by what "All" selects."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARDS = Path(__file__).parents[2] / "dashboards"
TEMPLATE_VARIABLES = ("datasource", "site", "generation")
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")
_GRAFANA_INTERVALS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}


@dataclass(frozen=True, slots=True)
class PanelQuery:
    dashboard: str
    panel: str
    ref_id: str
    expr: str
    raw: str

    def __str__(self) -> str:
        return f"{self.dashboard} / {self.panel} / {self.ref_id}: {self.expr}"


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    board: dict[str, Any] = json.loads(path.read_text())
    return board


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for panel in board.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def panel_queries() -> list[PanelQuery]:
    """Every PromQL expression of every panel of every dashboard, variables substituted."""
    found = []
    for path in dashboard_files():
        board = load(path)
        for panel in panels(board):
            for target in panel.get("targets", []):
                raw = target["expr"]
                found.append(
                    PanelQuery(path.name, panel["title"], target["refId"], substitute(raw), raw)
                )
    return found


def substitute(expr: str) -> str:
    """Template variables as "All" selects them (`.*`), Grafana's intervals as fixed windows."""

    def value(match: re.Match[str]) -> str:
        name = next(group for group in match.groups() if group)
        return _GRAFANA_INTERVALS.get(name, ".*")

    return _VARIABLE.sub(value, expr)
