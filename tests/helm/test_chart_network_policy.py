"""Who may reach whom under the chart's NetworkPolicies, evaluated as Kubernetes does (a pod that
any policy selects admits only what some policy's ingress rule allows): internet-facing routers
reach the control plane's gRPC port and the engines on the Ray workers, never the Ray head (its
job and client APIs run code unauthenticated); the Ray pods and the control plane reach each
other on every port."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from chart import CHART, Rendered, render, values_file

COMPONENT = "app.kubernetes.io/component"
ANY_PORT = "any-port"
KUBERAY_VALUES = values_file(CHART / "ci" / "kuberay-values.yaml")


@dataclass(frozen=True)
class Pod:
    labels: dict[str, str]
    ports: dict[str, int]  # named container ports


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", ()):
        assert expression["operator"] == "In", "only In here"
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def pods_of(rendered: Rendered, component: str) -> list[Pod]:
    found = []
    for _, template in rendered.pod_templates():
        labels = template["metadata"]["labels"]
        if labels.get(COMPONENT) == component:
            ports = {
                port["name"]: port["containerPort"]
                for container in template["spec"]["containers"]
                for port in container.get("ports", ())
                if "name" in port
            }
            found.append(Pod(labels, ports))
    assert found, f"no {component} pod rendered"
    return found


def admits(rendered: Rendered, source: Pod, target: Pod, port: str | int) -> bool:
    """Whether `source` may open a TCP connection to `target` on `port` (a name, a number or
    ANY_PORT for "some port chosen at run time")."""
    number = target.ports.get(port) if isinstance(port, str) else port
    policies = [
        p
        for p in rendered.of_kind("NetworkPolicy")
        if matches(p["spec"]["podSelector"], target.labels)
    ]
    assert policies, "every pod of the release is selected by some policy"
    for policy in policies:
        for rule in policy["spec"].get("ingress", ()):
            peers = rule.get("from")
            if peers is not None and not any(
                "podSelector" in peer and matches(peer["podSelector"], source.labels)
                for peer in peers
            ):
                continue
            for allowed in rule.get("ports", [{"protocol": "TCP"}]):
                if allowed.get("protocol", "TCP") != "TCP":
                    continue
                if "port" not in allowed:
                    return True
                if port != ANY_PORT and allowed["port"] in (port, number):
                    return True
    return False


@pytest.mark.parametrize("values", [None, KUBERAY_VALUES], ids=["pods", "kuberay"])
def test_routers_reach_the_control_planes_grpc_and_the_engines_but_not_the_ray_head(
    values: dict[str, Any] | None,
) -> None:
    rendered = render(values)
    (router,) = pods_of(rendered, "router")
    (control_plane,) = pods_of(rendered, "control-plane")
    (head,) = pods_of(rendered, "ray-head")
    assert admits(rendered, router, control_plane, "grpc")
    assert not admits(rendered, router, control_plane, ANY_PORT), "gRPC only"
    for worker in pods_of(rendered, "ray-worker"):
        assert admits(rendered, router, worker, ANY_PORT), "engines bind free ports"
    assert not admits(rendered, router, head, ANY_PORT)
    for ray_port in (6379, 8265, 10001):  # GCS, dashboard (job API), Ray client
        assert not admits(rendered, router, head, ray_port)


@pytest.mark.parametrize("values", [None, KUBERAY_VALUES], ids=["pods", "kuberay"])
def test_ray_pods_and_the_control_plane_reach_each_other_on_every_port(
    values: dict[str, Any] | None,
) -> None:
    rendered = render(values)
    ray_side = [
        *pods_of(rendered, "ray-head"),
        *pods_of(rendered, "ray-worker"),
        *pods_of(rendered, "control-plane"),
    ]
    for source in ray_side:
        for target in ray_side:
            assert admits(rendered, source, target, ANY_PORT)


def test_exporters_reach_only_the_control_planes_grpc_port() -> None:
    rendered = render({"exporter": {"hostNetwork": False}})
    exporter = pods_of(rendered, "exporter")[0]
    (control_plane,) = pods_of(rendered, "control-plane")
    assert admits(rendered, exporter, control_plane, "grpc")
    assert not admits(rendered, exporter, control_plane, ANY_PORT)
    for target in (*pods_of(rendered, "ray-head"), *pods_of(rendered, "ray-worker")):
        assert not admits(rendered, exporter, target, ANY_PORT)
