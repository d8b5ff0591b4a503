"""The chart lints clean and renders, with Helm's own engine, for the defaults and every ci/ set;
each set renders what it is for."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from chart import CI_FILES, NAMESPACE, RELEASE, ROOT, lint, render, value_sets, values_file

VALUE_SETS = value_sets()
ERROR = 3


def test_the_ci_folder_covers_the_required_value_sets() -> None:
    names = {path.stem for path in CI_FILES}
    assert {
        "two-sites-values",
        "kuberay-values",
        "monitoring-on-values",
        "external-only-values",
        "tls-values",
    } <= names


@pytest.mark.parametrize(("name", "values"), VALUE_SETS, ids=[n for n, _ in VALUE_SETS])
def test_lint_finds_no_errors(name: str, values: dict[str, Any] | None) -> None:
    report = lint(values)
    errors = [m for m in report["messages"] if m["severity"] >= ERROR]
    assert report["total_charts_linted"] == 1
    assert not errors and not report["errors"], f"{name}: {errors or report['errors']}"


@pytest.mark.parametrize(("name", "values"), VALUE_SETS, ids=[n for n, _ in VALUE_SETS])
def test_every_object_is_named_labelled_and_in_the_release_namespace(
    name: str, values: dict[str, Any] | None
) -> None:
    rendered = render(values)
    assert rendered.objects, f"{name} rendered nothing"
    seen: set[tuple[str, str]] = set()
    for obj in rendered.objects:
        key = (obj["kind"], obj["metadata"]["name"])
        assert key not in seen, f"{name}: {key} rendered twice"
        seen.add(key)
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == RELEASE
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == NAMESPACE
        selector = obj.get("spec", {}).get("selector", {})
        match_labels = selector.get("matchLabels", {}) if isinstance(selector, dict) else {}
        assert "helm.sh/chart" not in match_labels, "selectors are immutable: no chart version"


def test_defaults_run_ray_as_a_statefulset_with_a_worker_group_per_pool() -> None:
    rendered = render()
    statefulsets = {o["metadata"]["name"] for o in rendered.of_kind("StatefulSet")}
    assert statefulsets == {"llm-orchestrator-ray-head"}
    assert {o["metadata"]["name"] for o in rendered.of_kind("Deployment")} == {
        "llm-orchestrator-control-plane",
        "llm-orchestrator-router",
        "llm-orchestrator-ray-worker-kr-mi300x",
        "llm-orchestrator-ray-worker-us-mi355x",
    }
    assert not rendered.of_kind("RayCluster")
    assert {o["metadata"]["name"] for o in rendered.of_kind("Service")} == {
        "llm-orchestrator-ray-head",
        "llm-orchestrator-control-plane",
        "llm-orchestrator-router",
        "llm-orchestrator-router-metrics",  # ClusterIP only, for Prometheus
    }
    assert rendered.named("HorizontalPodAutoscaler", "llm-orchestrator-router")
    assert rendered.named("PodDisruptionBudget", "llm-orchestrator-router")
    assert {o["kind"] for o in rendered.objects}.isdisjoint(
        {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    ), "objects that need the Prometheus operator's CRDs are off by default"


def test_kuberay_mode_renders_one_raycluster_with_a_worker_group_per_pool() -> None:
    values = values_file(ROOT / "deploy/helm/orchestrator/ci/kuberay-values.yaml")
    rendered = render(values)
    (cluster,) = rendered.of_kind("RayCluster")
    groups = {g["groupName"]: g for g in cluster["spec"]["workerGroupSpecs"]}
    assert set(groups) == {pool["name"] for pool in values["pools"]}
    assert not rendered.of_kind("StatefulSet")
    assert not [o for o in rendered.of_kind("Deployment") if "ray" in o["metadata"]["name"]]
    (container,) = rendered.named("Deployment", "llm-orchestrator-control-plane")["spec"][
        "template"
    ]["spec"]["containers"]
    assert "--ray-address=llm-orchestrator-ray-head-svc:6379" in container["args"], (
        "the control plane joins KubeRay's head Service"
    )
    assert "--address=llm-orchestrator-ray-head-svc:6379" in container["args"][0]


def test_monitoring_on_renders_monitors_rules_from_the_rules_file_and_dashboards() -> None:
    rendered = render(values_file(ROOT / "deploy/helm/orchestrator/ci/monitoring-on-values.yaml"))
    (service_monitor,) = rendered.of_kind("ServiceMonitor")
    (pod_monitor,) = rendered.of_kind("PodMonitor")
    assert service_monitor["metadata"]["labels"]["release"] == "monitoring"
    assert service_monitor["spec"]["endpoints"][0]["port"] == "metrics"  # not the API port
    services = {s["metadata"]["name"]: s["spec"] for s in rendered.of_kind("Service")}
    api, metrics = services["llm-orchestrator-router"], services["llm-orchestrator-router-metrics"]
    assert "metrics" not in {p["name"] for p in api["ports"]}  # not where API clients come
    assert metrics["type"] == "ClusterIP"
    assert {p["name"]: p["targetPort"] for p in metrics["ports"]} == {"metrics": "metrics"}
    assert metrics["selector"] == api["selector"]
    (monitored,) = [  # the ServiceMonitor finds the metrics Service by its labels
        name
        for name, spec in services.items()
        if service_monitor["spec"]["selector"]["matchLabels"].items()
        <= rendered.named("Service", name)["metadata"]["labels"].items()
        and "metrics" in {p["name"] for p in spec["ports"]}
    ]
    assert monitored == "llm-orchestrator-router-metrics"
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    (rule,) = rendered.of_kind("PrometheusRule")
    source = yaml.safe_load(
        (ROOT / "orchestrator/monitoring/data/rules.yaml").read_text(encoding="utf-8")
    )
    assert rule["spec"]["groups"] == source["groups"]
    (dashboards,) = [
        o for o in rendered.of_kind("ConfigMap") if o["metadata"]["name"].endswith("dashboards")
    ]
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"
    expected = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "dashboards").glob("*.json")}
    assert expected, "the repository has dashboards to ship"
    assert {name: text.strip() for name, text in dashboards["data"].items()} == {
        name: text.strip() for name, text in expected.items()
    }


def test_external_only_renders_no_ray_workers_and_no_exporters() -> None:
    rendered = render(values_file(ROOT / "deploy/helm/orchestrator/ci/external-only-values.yaml"))
    assert {o["metadata"]["name"] for o in rendered.of_kind("Deployment")} == {
        "llm-orchestrator-control-plane",
        "llm-orchestrator-router",
    }
    assert not rendered.of_kind("DaemonSet")
    assert not rendered.of_kind("HorizontalPodAutoscaler")
    assert rendered.named("Deployment", "llm-orchestrator-router")["spec"]["replicas"] == 3


def test_notes_say_how_to_reach_the_endpoint_and_the_dashboards() -> None:
    notes = render().notes
    assert "kubectl port-forward -n inference svc/llm-orchestrator-router 8000:8000" in notes
    assert "/v1/models" in notes
    assert "grafana_dashboard=1" in notes


def test_a_pool_in_an_unknown_site_fails_the_render_naming_it() -> None:
    from helm_python import HelmError

    values = {
        "pools": [
            {"name": "x", "site": "eu", "generation": "MI300X", "engine": "vllm", "replicas": 1}
        ]
    }
    with pytest.raises(HelmError, match=r"pools\[0\] \(x\): site \\?\"eu\\?\" is not under"):
        render(values)


def test_a_pool_larger_than_its_workers_fails_the_render() -> None:
    from helm_python import HelmError

    values = {
        "pools": [
            {
                "name": "x",
                "site": "kr",
                "generation": "MI300X",
                "engine": "vllm",
                "replicas": 9,
                "workers": {"replicas": 1, "gpus": 8},
            }
        ]
    }
    with pytest.raises(HelmError, match="need 9 GPUs, but its workers offer 8"):
        render(values)
