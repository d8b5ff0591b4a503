"""Right by construction: each pool's Ray workers request amd.com/gpu and are pinned to their
generation's device id and their site, and start Ray with the labels and resources placement
reads (their Kubernetes node's name among the labels, for node health reports); the exporter
mounts host /sys read-only and reports health to the control plane, which the NetworkPolicy
admits; every pod is non-root with a read-only root filesystem and no capabilities; RBAC grants
get/list/watch on pods and nodes, nothing else."""

from __future__ import annotations

import json
from typing import Any

import pytest
from chart import Rendered, merged_values, render, value_sets

from orchestrator.controlplane.placement import (
    ACCELERATOR_RESOURCE_PREFIX,
    GPU_SLOT_RESOURCE,
    K8S_NODE_LABEL,
    SITE_LABEL,
)
from orchestrator.core.generations import spec_of

VALUE_SETS = value_sets()
IDS = [n for n, _ in VALUE_SETS]


def launched(values: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [p for p in merged_values(values)["pools"] if p["engine"] != "external"]


def worker_templates(rendered: Rendered) -> dict[str, tuple[dict[str, Any], list[str]]]:
    """Pool name → (pod template, `ray start` arguments as `--key=value`)."""
    found: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for obj in rendered.of_kind("Deployment"):
        pool = obj["metadata"]["labels"].get("orchestrator.io/pool")
        if pool:
            template = obj["spec"]["template"]
            found[pool] = (template, template["spec"]["containers"][0]["command"][2:])
    for cluster in rendered.of_kind("RayCluster"):
        for group in cluster["spec"]["workerGroupSpecs"]:
            params = group["rayStartParams"]
            args = [f"--{key}={value.strip(chr(39))}" for key, value in params.items()]
            found[group["groupName"]] = (group["template"], args)
    return found


def flag(args: list[str], name: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    return value


NODE_NAME_FROM_DOWNWARD_API = {
    "name": "NODE_NAME",
    "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
}


def ray_labels(container: dict[str, Any], raw: str) -> dict[str, str]:
    """`--labels` as Ray parses it once the kubelet has expanded `$(NODE_NAME)` from the
    container's env (which must take it from the downward API) on node `gpu-node-7`."""
    from ray._private.label_utils import parse_node_labels_string

    assert NODE_NAME_FROM_DOWNWARD_API in container.get("env", ())
    labels: dict[str, str] = parse_node_labels_string(raw.replace("$(NODE_NAME)", "gpu-node-7"))
    return labels


@pytest.mark.parametrize(("name", "values"), VALUE_SETS, ids=IDS)
def test_each_pools_workers_request_gpus_pinned_to_generation_and_site(
    name: str, values: dict[str, Any] | None
) -> None:
    merged = merged_values(values)
    workers = worker_templates(render(values))
    pools = launched(values)
    assert set(workers) == {p["name"] for p in pools}, "one worker group per launched pool"
    for pool in pools:
        template, args = workers[pool["name"]]
        generation = spec_of(pool["generation"])
        site_value = (merged["sites"][pool["site"]] or {}).get("topologyValue", pool["site"])
        gpus = pool.get("workers", {}).get("gpus", 8)
        (container,) = template["spec"]["containers"]
        resources = container["resources"]
        assert resources["requests"]["amd.com/gpu"] == gpus
        assert resources["limits"]["amd.com/gpu"] == gpus
        terms = template["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert len(terms) == 1, "one term: every expression must hold (terms are ORed)"
        expressions = {e["key"]: (e["operator"], e["values"]) for e in terms[0]["matchExpressions"]}
        assert expressions == {
            "amd.com/gpu.device-id": ("In", [generation.device_id]),
            merged["siteTopologyKey"]: ("In", [site_value]),
        }
        assert ray_labels(container, flag(args, "labels")) == {
            SITE_LABEL: pool["site"],
            K8S_NODE_LABEL: "gpu-node-7",
        }
        assert flag(args, "num-gpus") == str(gpus)
        assert json.loads(flag(args, "resources")) == {
            f"{ACCELERATOR_RESOURCE_PREFIX}{generation.ray_accelerator_type}": 1,
            GPU_SLOT_RESOURCE: gpus,
        }


def test_the_mi300x_and_mi355x_pools_land_on_74a1_and_75a3_nodes() -> None:
    workers = worker_templates(render())
    device_ids = {}
    for pool, (template, _) in workers.items():
        (term,) = template["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        (device,) = [e for e in term["matchExpressions"] if e["key"] == "amd.com/gpu.device-id"]
        device_ids[pool] = device["values"]
    assert device_ids == {"kr-mi300x": ["74a1"], "us-mi355x": ["75a3"]}


@pytest.mark.parametrize(("name", "values"), VALUE_SETS, ids=IDS)
def test_the_exporter_mounts_host_sys_read_only_on_gpu_nodes_of_each_site(
    name: str, values: dict[str, Any] | None
) -> None:
    rendered = render(values)
    merged = merged_values(values)
    daemonsets = rendered.of_kind("DaemonSet")
    if not merged["exporter"]["enabled"]:
        assert not daemonsets
        return
    assert {d["metadata"]["labels"]["orchestrator.io/site"] for d in daemonsets} == set(
        merged["sites"]
    )
    for daemonset in daemonsets:
        spec = daemonset["spec"]["template"]["spec"]
        (volume,) = [v for v in spec["volumes"] if v.get("hostPath", {}).get("path") == "/sys"]
        (container,) = spec["containers"]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        assert mount["readOnly"] is True
        assert f"--sysfs-root={mount['mountPath']}" in container["command"]
        (term,) = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert {"key": "amd.com/gpu.device-id", "operator": "Exists"} in term["matchExpressions"]
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


@pytest.mark.parametrize(("name", "values"), VALUE_SETS, ids=IDS)
def test_every_pod_is_non_root_read_only_and_without_capabilities(
    name: str, values: dict[str, Any] | None
) -> None:
    templates = list(render(values).pod_templates())
    assert templates
    host_paths = {"/sys", merged_values(values)["exporter"]["rocmInfoPath"]}
    for label, template in templates:
        spec = template["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, label
        assert not spec.get("hostPID") and not spec.get("hostIPC"), label
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["runAsNonRoot"] is True, label
            assert context["readOnlyRootFilesystem"] is True, label
            assert context["allowPrivilegeEscalation"] is False, label
            assert context["capabilities"] == {"drop": ["ALL"]}, label
            assert not context.get("privileged"), label
        for volume in spec.get("volumes", ()):
            if "hostPath" in volume:
                assert volume["hostPath"]["path"] in host_paths, f"{label}: /sys and ROCm's .info"
                mounts = [
                    m for c in spec["containers"] for m in c["volumeMounts"]
                    if m["name"] == volume["name"]
                ]  # fmt: skip
                assert all(m["readOnly"] for m in mounts), f"{label}: host paths read-only"


def test_rbac_grants_get_list_watch_on_pods_and_nodes_and_nothing_else() -> None:
    rendered = render()
    rules = [
        (obj["kind"], rule)
        for obj in rendered.objects
        if obj["kind"] in ("Role", "ClusterRole")
        for rule in obj["rules"]
    ]
    granted = {
        (kind, group, resource, verb)
        for kind, rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {
        ("Role", "", "pods", "get"),
        ("Role", "", "pods", "list"),
        ("Role", "", "pods", "watch"),
        ("ClusterRole", "", "nodes", "get"),
        ("ClusterRole", "", "nodes", "list"),
        ("ClusterRole", "", "nodes", "watch"),
    }
    service_account = rendered.of_kind("ServiceAccount")[0]["metadata"]["name"]
    for binding in rendered.of_kind("RoleBinding") + rendered.of_kind("ClusterRoleBinding"):
        assert [s["name"] for s in binding["subjects"]] == [service_account]


def test_only_the_control_plane_mounts_an_api_token() -> None:
    for label, template in render().pod_templates():
        mounts = template["spec"].get("automountServiceAccountToken")
        assert mounts is ("control-plane" in label), label


def test_api_keys_come_from_the_referenced_secret() -> None:
    values = {"router": {"apiKeys": {"existingSecret": "keys", "secretKey": "list"}}}
    router = render(values).named("Deployment", "llm-orchestrator-router")
    spec = router["spec"]["template"]["spec"]
    (volume,) = [v for v in spec["volumes"] if "secret" in v]
    assert volume["secret"] == {"secretName": "keys", "items": [{"key": "list", "path": "list"}]}
    (container,) = spec["containers"]
    assert "--api-keys-file=/etc/orchestrator/api-keys/list" in container["command"]
    assert not render().named("Deployment", "llm-orchestrator-router")["spec"]["template"]["spec"][
        "volumes"
    ][1:], "no secret volume without a secret"


def test_network_policies_select_only_this_release() -> None:
    policies = render().of_kind("NetworkPolicy")
    assert {p["metadata"]["name"] for p in policies} == {
        "llm-orchestrator-ray",
        "llm-orchestrator-control-plane-router",
        "llm-orchestrator-engine-router",
        "llm-orchestrator-router",
        "llm-orchestrator-exporter",
        "llm-orchestrator-control-plane-health",
    }
    router = next(p for p in policies if p["metadata"]["name"] == "llm-orchestrator-router")
    ports = [port["port"] for port in router["spec"]["ingress"][0]["ports"]]
    assert ports == ["http", "grpc"]  # from anywhere
    assert len(router["spec"]["ingress"]) == 1, (
        "no metrics port without networkPolicy.prometheusFrom"
    )
    peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    opened = render({"networkPolicy": {"prometheusFrom": peers}}).named(
        "NetworkPolicy", "llm-orchestrator-router"
    )
    metrics_rule = opened["spec"]["ingress"][1]
    assert metrics_rule == {"from": peers, "ports": [{"port": "metrics", "protocol": "TCP"}]}


def pod_labels(rendered: Rendered, kind: str, name: str) -> dict[str, str]:
    labels: dict[str, str] = rendered.named(kind, name)["spec"]["template"]["metadata"]["labels"]
    return labels


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, "only matchLabels here"
    return bool(selector["matchLabels"].items() <= labels.items())


def test_each_exporter_reports_its_nodes_health_by_node_name_to_the_control_plane() -> None:
    from orchestrator.cli import build_parser

    rendered = render()
    service = rendered.named("Service", "llm-orchestrator-control-plane")
    (grpc_port,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "grpc"]
    daemonsets = rendered.of_kind("DaemonSet")
    assert daemonsets
    for daemonset in daemonsets:
        (container,) = daemonset["spec"]["template"]["spec"]["containers"]
        assert NODE_NAME_FROM_DOWNWARD_API in container["env"]
        args = build_parser().parse_args(container["command"][1:])
        assert args.node == "$(NODE_NAME)", "the name the Ray workers' k8s-node label carries"
        assert args.report_as is None, "reported under --node"
        assert args.control_plane == f"llm-orchestrator-control-plane:{grpc_port}"
    quiet = render({"exporter": {"reportHealth": False}})
    for daemonset in quiet.of_kind("DaemonSet"):
        (container,) = daemonset["spec"]["template"]["spec"]["containers"]
        assert not [a for a in container["command"] if a.startswith("--control-plane")]
    names = {p["metadata"]["name"] for p in quiet.of_kind("NetworkPolicy")}
    assert "llm-orchestrator-control-plane-health" not in names


@pytest.mark.parametrize("host_network", [True, False], ids=["host-network", "pod-network"])
def test_the_network_policy_admits_exporters_to_the_control_planes_grpc_port(
    host_network: bool,
) -> None:
    cidrs = ["10.0.0.0/16", "fd00:10::/64"]
    values = {"exporter": {"hostNetwork": host_network}, "networkPolicy": {"nodeCidrs": cidrs}}
    rendered = render(values)
    policy = rendered.named("NetworkPolicy", "llm-orchestrator-control-plane-health")
    control_plane = pod_labels(rendered, "Deployment", "llm-orchestrator-control-plane")
    assert selects(policy["spec"]["podSelector"], control_plane)
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "grpc", "protocol": "TCP"}]
    (container,) = rendered.named("Deployment", "llm-orchestrator-control-plane")["spec"][
        "template"
    ]["spec"]["containers"]
    assert "grpc" in {p["name"] for p in container["ports"]}
    pod_selectors = [s["podSelector"] for s in rule["from"] if "podSelector" in s]
    for daemonset in rendered.of_kind("DaemonSet"):
        exporter = pod_labels(rendered, "DaemonSet", daemonset["metadata"]["name"])
        assert any(selects(s, exporter) for s in pod_selectors)
    router = pod_labels(rendered, "Deployment", "llm-orchestrator-router")
    assert not any(selects(s, router) for s in pod_selectors), "exporters only"
    blocks = [s["ipBlock"]["cidr"] for s in rule["from"] if "ipBlock" in s]
    assert blocks == (cidrs if host_network else []), "node addresses only from the host network"


def test_notes_warn_when_host_network_exporters_have_no_node_cidrs_to_come_from() -> None:
    assert "networkPolicy.nodeCidrs" in render().notes
    assert (
        "networkPolicy.nodeCidrs"
        not in render({"networkPolicy": {"nodeCidrs": ["10.0.0.0/8"]}}).notes
    )
    assert "networkPolicy.nodeCidrs" not in render({"exporter": {"hostNetwork": False}}).notes


def test_the_exporter_reads_the_hosts_rocm_version_file_read_only_unless_told_not_to() -> None:
    def exporter_spec(values: dict[str, Any] | None) -> dict[str, Any]:
        daemonset = render(values).of_kind("DaemonSet")[0]
        spec: dict[str, Any] = daemonset["spec"]["template"]["spec"]
        return spec

    spec = exporter_spec(None)
    (volume,) = [v for v in spec["volumes"] if v["name"] == "rocm-info"]
    assert volume["hostPath"] == {"path": "/opt/rocm/.info", "type": "DirectoryOrCreate"}
    (container,) = spec["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "rocm-info"]
    assert mount["readOnly"] is True
    assert f"--rocm-version-file={mount['mountPath']}/version" in container["command"]

    off = exporter_spec({"exporter": {"rocmInfoPath": ""}})
    assert not [v for v in off["volumes"] if v["name"] == "rocm-info"]
    assert "--rocm-version-file=" in off["containers"][0]["command"]
    with pytest.raises(Exception, match="rocmInfoPath"):
        render({"exporter": {"rocmInfoPath": "opt/rocm"}})
