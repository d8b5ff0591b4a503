"""The Grafana dashboards: valid JSON, templated on datasource, site and generation, every panel
reading the chosen datasource and every query filtered by the chosen site and generation."""

from __future__ import annotations

import re

import pytest
from dashboard_queries import (
    TEMPLATE_VARIABLES,
    dashboard_files,
    load,
    panel_queries,
    panels,
    substitute,
)
from metric_names import exported_names, metric_names_in

from orchestrator.monitoring.rules import all_rules

EXPECTED = {"fleet-overview.json", "fabric-health.json", "hbm.json"}
# Series with no site or generation: the router's own and the latency targets.
UNFILTERED = re.compile(
    r"orchestrator_router_(requests|routable|slo_target)|orchestrator:target_|job:"
)


def test_the_three_dashboards_exist_with_unique_uids() -> None:
    names = {path.name for path in dashboard_files()}
    assert names == EXPECTED
    uids = [load(path)["uid"] for path in dashboard_files()]
    assert len(set(uids)) == len(uids)


@pytest.mark.parametrize("path", dashboard_files(), ids=lambda p: p.name)
def test_each_dashboard_is_templated_on_datasource_site_and_generation(path) -> None:
    board = load(path)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert set(TEMPLATE_VARIABLES) <= set(variables)
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("site", "generation"):
        assert variables[name]["type"] == "query"
        assert variables[name]["includeAll"] and variables[name]["allValue"] == ".*"
        assert variables[name]["datasource"]["uid"] == "${datasource}"


@pytest.mark.parametrize("path", dashboard_files(), ids=lambda p: p.name)
def test_every_panel_queries_the_chosen_datasource(path) -> None:
    for panel in panels(load(path)):
        if panel["type"] == "row":
            continue
        assert panel["targets"], f"{panel['title']} has no query"
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            assert target["expr"].strip(), panel["title"]


def test_every_fleet_or_node_query_filters_on_site_and_generation() -> None:
    for query in panel_queries():
        if not UNFILTERED.search(query.raw):
            assert '"$site"' in query.raw and '"$generation"' in query.raw, str(query)


def test_every_metric_a_panel_reads_is_exported_or_recorded() -> None:
    known = exported_names() | {rule.name for rule in all_rules() if not rule.is_alert}
    for query in panel_queries():
        assert metric_names_in(query.expr) - known == set(), str(query)


def test_panel_ids_are_unique_and_panels_do_not_overlap() -> None:
    for path in dashboard_files():
        board = load(path)
        ids = [panel["id"] for panel in panels(board)]
        assert len(ids) == len(set(ids)), path.name
        cells: set[tuple[int, int]] = set()
        for panel in panels(board):
            grid = panel["gridPos"]
            for x in range(grid["x"], grid["x"] + grid["w"]):
                for y in range(grid["y"], grid["y"] + grid["h"]):
                    assert (x, y) not in cells, f"{path.name}: {panel['title']} overlaps"
                    cells.add((x, y))
            assert grid["x"] + grid["w"] <= 24


def test_substitution_replaces_every_variable_form() -> None:
    expr = 'rate(x{site=~"$site",generation=~"${generation}",n=~"[[node]]"}[$__rate_interval])'
    assert substitute(expr) == 'rate(x{site=~".*",generation=~".*",n=~".*"}[1m])'
