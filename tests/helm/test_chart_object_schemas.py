"""Every rendered object is valid: built-in kinds against Kubernetes' OpenAPI schemas
(kubernetes-validate, strict: unknown fields are errors) for the oldest and newest Kubernetes it
ships; RayCluster, ServiceMonitor, PodMonitor, PrometheusRule and ScrapeConfig against their
CRDs' schemas (fixtures/crds, source noted in each), with the RayCluster's pod templates
checked as Kubernetes PodTemplates."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from chart import CRD_KINDS, Rendered, render, value_sets
from kubernetes_validate import utils as kubernetes_versions

VALUE_SETS = value_sets()
VERSIONS = kubernetes_versions.all_versions()
OLDEST, NEWEST = VERSIONS[0], VERSIONS[-1]
FIXTURES = Path(__file__).parent / "fixtures" / "crds"


@cache
def rendered(name: str) -> Rendered:
    return render(dict(VALUE_SETS)[name])


@cache
def crd_validator(kind: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((FIXTURES / f"{kind.lower()}.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_crd_fixtures_name_their_upstream_source() -> None:
    for kind in CRD_KINDS:
        schema = json.loads((FIXTURES / f"{kind.lower()}.schema.json").read_text())
        assert "github.com" in schema["$comment"] or "/" in schema["$comment"]
        assert "openAPIV3Schema" in schema["$comment"]


@pytest.mark.parametrize("version", [OLDEST, NEWEST])
@pytest.mark.parametrize("name", [n for n, _ in VALUE_SETS])
def test_built_in_objects_validate_strictly_against_kubernetes(name: str, version: str) -> None:
    checked = 0
    for obj in rendered(name).objects:
        if obj["kind"] in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(p) for p in error.path)
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} on {version}: {path}: {error}")
        checked += 1
    assert checked >= 8


@pytest.mark.parametrize("name", [n for n, _ in VALUE_SETS])
def test_custom_resources_validate_against_their_crd_schemas(name: str) -> None:
    for obj in rendered(name).objects:
        if obj["kind"] not in CRD_KINDS:
            continue
        errors = sorted(crd_validator(obj["kind"]).iter_errors(obj), key=str)
        assert not errors, f"{obj['kind']}: " + "; ".join(
            f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors
        )
    for label, template in rendered(name).pod_templates():
        if not label.startswith("RayCluster"):
            continue
        pod_template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": "t"},
            "template": template,
        }
        for version in (OLDEST, NEWEST):
            kubernetes_validate.validate(pod_template, version, strict=True)


def test_the_crd_schemas_catch_a_broken_object() -> None:
    """The fixtures are not vacuous: a field typo, a bad duration, a URL without a scheme and a
    missing group fail."""
    monitoring = dict(value_sets())["monitoring-on-values"]
    objects = {o["kind"]: o for o in render(monitoring).objects}
    broken_rule: dict[str, Any] = json.loads(json.dumps(objects["PrometheusRule"]))
    broken_rule["spec"]["groups"][0]["rules"][0]["for"] = "five minutes"
    assert list(crd_validator("PrometheusRule").iter_errors(broken_rule))
    broken_monitor: dict[str, Any] = json.loads(json.dumps(objects["ServiceMonitor"]))
    broken_monitor["spec"]["endpoints"][0]["intervall"] = "15s"
    assert list(crd_validator("ServiceMonitor").iter_errors(broken_monitor))
    broken_scrape: dict[str, Any] = json.loads(json.dumps(objects["ScrapeConfig"]))
    broken_scrape["spec"]["httpSDConfigs"][0]["url"] = "llm-orchestrator-control-plane:50053"
    assert list(crd_validator("ScrapeConfig").iter_errors(broken_scrape))
    kuberay = dict(value_sets())["kuberay-values"]
    (cluster,) = render(kuberay).of_kind("RayCluster")
    del cluster["spec"]["workerGroupSpecs"][0]["groupName"]
    assert list(crd_validator("RayCluster").iter_errors(cluster))
