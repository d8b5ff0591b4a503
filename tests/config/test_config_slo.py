"""The `slo:` section: validated once, inherited field by field, the same through the config,
the replicas file and the router's flags."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from orchestrator.cli import router_slo
from orchestrator.config import ConfigError, default_config, parse_config
from orchestrator.config.slo import SloSpec, parse_class_slo
from orchestrator.core.errors import OrchestratorError
from orchestrator.core.slo import SloTarget
from orchestrator.table.static_file import load_replicas_slo

SECTION = """
ttftS: 2.0
tpotS: 0.1
classes:
  interactive: {tpotS: 0.05}
  batch: {ttftS: 30, tpotS: 0.2, e2eS: 900}
models:
  small:
    ttftS: 0.5
    classes: {interactive: {tpotS: 0.02}}
"""


def spec() -> SloSpec:
    return SloSpec.model_validate(yaml.safe_load(SECTION))


def test_unset_fields_come_from_the_level_above() -> None:
    targets = spec().targets()
    assert targets.target("big", "interactive") == SloTarget(2.0, 0.05)
    assert targets.target("big", "batch") == SloTarget(30.0, 0.2, 900.0)
    # the model's class: its own TPOT, the model's TTFT
    assert targets.target("small", "interactive") == SloTarget(0.5, 0.02)
    assert targets.target("small", "other") == SloTarget(0.5, 0.1)


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"tpotS": 0}, "tpotS"),
        ({"classes": {"batch": {"ttftS": -1}}}, "ttftS"),
        ({"classes": {"Batch!": {}}}, "classes"),
        ({"classes": {"batch": {"tpot": 0.1}}}, "tpot"),
        ({"ttft": 1}, "ttft"),
    ],
)
def test_bad_targets_are_refused_naming_the_field(document: dict, field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        SloSpec.model_validate(document)


def slo_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False)
    router_slo.add_flags(parser)
    return parser


@pytest.mark.parametrize(
    "document",
    [
        {"ttftS": 1.5, "tpotS": 0.06, "classes": {"batch": {}}},
        {"tpotS": 0.0123456789, "e2eS": 90, "classes": {"x": {"ttftS": 0.3}, "batch": {}}},
    ],
)
def test_the_flags_carry_the_same_targets_as_the_section(document: dict) -> None:
    section = SloSpec.model_validate(document)
    args = slo_parser().parse_args(section.router_flags())
    assert router_slo.targets(args) == section.targets()
    assert router_slo.targets(slo_parser().parse_args([])) == SloSpec().targets()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ttft", "-1"], "greater than 0"),
        (["--e2e", "inf"], "finite number"),
        (["--tpot", "fast"], "valid number"),
        (["--class-slo", "batch=1"], "NAME=TTFT/TPOT"),
    ],
)
def test_a_bad_flag_names_the_flag_and_the_value(flags: list[str], message: str) -> None:
    with pytest.raises(argparse.ArgumentError) as error:
        slo_parser().parse_args(flags)
    assert message in str(error.value) and flags[0] in str(error.value)
    assert flags[1] in str(error.value)


def test_flags_override_the_replicas_files_fleet_wide_targets(tmp_path: Path) -> None:
    replicas = tmp_path / "replicas.yaml"
    replicas.write_text(
        "apiVersion: orchestrator/v1alpha1\nkind: Replicas\nmodel: m\nreplicas: []\n"
        f"slo:\n{''.join('  ' + line + chr(10) for line in SECTION.strip().splitlines())}"
    )
    parser = argparse.ArgumentParser()
    router_slo.add_flags(parser)
    args = parser.parse_args(["--tpot", "0.07", "--class-slo", "batch=60/0.3"])
    targets = router_slo.targets(args, load_replicas_slo(replicas))
    assert targets.target("big", "other") == SloTarget(2.0, 0.07)
    assert targets.target("big", "batch") == SloTarget(60.0, 0.3)
    assert targets.target("small", "interactive") == SloTarget(0.5, 0.02)


def test_a_bad_slo_in_a_replicas_file_names_the_field(tmp_path: Path) -> None:
    replicas = tmp_path / "replicas.yaml"
    replicas.write_text(
        "apiVersion: orchestrator/v1alpha1\nkind: Replicas\nmodel: m\nreplicas: []\n"
        "slo: {tpotS: -1}\n"
    )
    with pytest.raises(OrchestratorError, match=r"slo\.tpotS"):
        load_replicas_slo(replicas)


@pytest.mark.parametrize(
    "raw", ["batch", "batch=1", "batch=1/0/2", "Batch=1/2", "b=1/x", "b=1/2/3/4"]
)
def test_a_bad_class_flag_says_what_is_expected(raw: str) -> None:
    with pytest.raises(ValueError, match=r"NAME=TTFT/TPOT|tpot_s|could not convert"):
        parse_class_slo(raw)


CONFIG = """apiVersion: orchestrator/v1alpha1
kind: Orchestrator
sites: {lab: {}}
pools:
  - {name: lab-mi300x, site: lab, generation: MI300X, engine: sim, replicas: 1}
"""


def test_the_orchestrator_config_states_the_routers_targets() -> None:
    config = parse_config(CONFIG + "router:\n  slo: {tpotS: 0.05, classes: {batch: {ttftS: 30}}}\n")
    assert config.router.slo.targets().target("any", "batch") == SloTarget(30.0, 0.05)
    assert default_config().router.slo.targets() == SloSpec().targets()


def test_per_model_targets_belong_in_a_replicas_file() -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(CONFIG + "router:\n  slo: {models: {m: {tpotS: 0.05}}}\n")
    assert "router.slo" in error.value.message and "replicas file" in error.value.message
