"""The alert and recording rules: promtool accepts them, every alert has a promtool case that
fires and one that stays quiet, and every metric they read is one our processes export."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from metric_names import exported_names, metric_names_in

from orchestrator.monitoring.rules import all_rules, duration_s, render_rules, rules_text

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
RULE_TESTS = Path(__file__).with_name("rule_tests.yaml")
pytestmark = pytest.mark.skipif(
    not Path(PROMTOOL).is_file(), reason="promtool is not installed (apt-get install prometheus)"
)


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def with_rules(tmp_path: Path, text: str) -> Path:
    (tmp_path / "rules.yaml").write_text(text)
    shutil.copy(RULE_TESTS, tmp_path / "rule_tests.yaml")
    return tmp_path


def test_promtool_check_rules_accepts_the_shipped_rules(tmp_path: Path) -> None:
    result = promtool("check", "rules", "rules.yaml", cwd=with_rules(tmp_path, rules_text()))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(all_rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass_on_the_shipped_rules(tmp_path: Path) -> None:
    result = promtool("test", "rules", "rule_tests.yaml", cwd=with_rules(tmp_path, rules_text()))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_fail_when_a_threshold_moves(tmp_path: Path) -> None:
    """The cases are tight enough to notice a changed threshold (here PFC occupancy 0.5 -> 0.8)."""
    moved = rules_text().replace(
        "netdev:nic_pfc_pause_occupancy:ratio1m > 0.5",
        "netdev:nic_pfc_pause_occupancy:ratio1m > 0.8",
    )
    assert moved != rules_text()
    result = promtool("test", "rules", "rule_tests.yaml", cwd=with_rules(tmp_path, moved))
    assert result.returncode != 0
    assert "NicPfcPauseOccupancyHigh" in result.stdout + result.stderr


def test_promtool_evaluates_every_group_in_file_order() -> None:
    groups = [group["name"] for group in yaml.safe_load(rules_text())["groups"]]
    assert yaml.safe_load(RULE_TESTS.read_text())["group_eval_order"] == groups


def cases() -> list[dict]:
    document = yaml.safe_load(RULE_TESTS.read_text())
    return [case for test in document["tests"] for case in test.get("alert_rule_test", [])]


def test_every_alert_has_a_promtool_case_where_it_fires() -> None:
    alerts = {rule.name for rule in all_rules() if rule.is_alert}
    firing = {case["alertname"] for case in cases() if case.get("exp_alerts")}
    assert alerts - firing == set(), "alerts without a promtool case that fires"
    assert firing - alerts == set(), "promtool cases for alerts that do not exist"


def test_every_alert_has_a_promtool_case_where_it_stays_quiet() -> None:
    alerts = {rule.name for rule in all_rules() if rule.is_alert}
    quiet = {case["alertname"] for case in cases() if not case.get("exp_alerts")}
    assert alerts - quiet == set(), "alerts without a promtool case where they must not fire"


def test_every_alert_names_a_severity_and_a_summary() -> None:
    document = yaml.safe_load(rules_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
                assert rule["annotations"]["summary"], rule["alert"]


def test_every_threshold_says_where_it_comes_from() -> None:
    """Each alert is preceded by a comment naming its source or marking it tunable."""
    lines = rules_text().splitlines()
    for index, line in enumerate(lines):
        if line.strip().startswith("- alert:") and not line.strip().endswith("ExporterDown"):
            comment = "\n".join(lines[index + 1 : index + 4])
            assert "source:" in comment or "tunable:" in comment, line


def test_every_metric_the_rules_read_is_exported_or_recorded() -> None:
    recorded = {rule.name for rule in all_rules() if not rule.is_alert}
    known = exported_names() | recorded
    for rule in all_rules():
        assert metric_names_in(rule.expr) - known == set(), rule.name


def test_rendering_caps_for_durations_and_scales_latency_targets(tmp_path: Path) -> None:
    rendered = yaml.safe_load(render_rules(max_for_s=2, latency_scale=10))
    rules = {r.get("alert") or r["record"]: r for g in rendered["groups"] for r in g["rules"]}
    assert duration_s(rules["RdmaPortNotActive"]["for"]) == 2
    assert duration_s(rules["NicPfcPauseOccupancyHigh"]["for"]) == 2
    assert "for" not in rules["RdmaLinkDowned"]
    assert rules["orchestrator:target_ttft_seconds"]["expr"] == "vector(30)"
    assert rules["orchestrator:target_tpot_seconds"]["expr"] == "vector(0.8)"
    assert rules["RdmaCnpSurge"]["expr"] == next(
        r.expr for r in all_rules() if r.name == "RdmaCnpSurge"
    )
    (tmp_path / "rules.yaml").write_text(render_rules(max_for_s=0.5))
    result = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"max_for_s": -1}, "max_for_s"), ({"latency_scale": 0}, "latency_scale")],
)
def test_rendering_rejects_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render_rules(**kwargs)
