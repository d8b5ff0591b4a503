"""Engines are scraped through the control plane's HTTP service discovery: the ScrapeConfig points
at the control plane's `http-sd` Service port with its scheme (https, with a client certificate,
when the control plane speaks mutual TLS), the control plane is started with the matching
`--sd-port`, the policies let the named Prometheus peers in, and bad values are refused."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from chart import CHART, Rendered, render, validate_values, values_file
from helm_python import HelmError, HelmValuesError

from orchestrator.cli import build_parser
from orchestrator.controlplane.http_sd import ENGINES_PATH
from orchestrator.monitoring.targets import ENGINE_JOB

MONITORING_VALUES = values_file(CHART / "ci" / "monitoring-on-values.yaml")
TLS_VALUES = values_file(CHART / "ci" / "tls-values.yaml")
SERVICE = "llm-orchestrator-control-plane"
PROMETHEUS = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]


def engines_on(**engines: Any) -> dict[str, Any]:
    return {"monitoring": {"engines": {"enabled": True, **engines}}}


def scrape_config(rendered: Rendered) -> dict[str, Any]:
    (config,) = rendered.of_kind("ScrapeConfig")
    return config


def control_plane_args(rendered: Rendered) -> argparse.Namespace:
    deployment = rendered.named("Deployment", SERVICE)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    argv = [*container["command"], *container["args"]]
    return build_parser().parse_args(argv[argv.index("orchestrator", 1) + 1 :])


def ports_by_name(rendered: Rendered) -> tuple[dict[str, Any], dict[str, Any]]:
    """The control plane's Service ports and container ports, by name."""
    service = rendered.named("Service", SERVICE)
    deployment = rendered.named("Deployment", SERVICE)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return (
        {port["name"]: port for port in service["spec"]["ports"]},
        {port["name"]: port for port in container["ports"]},
    )


def test_engines_are_not_scraped_unless_asked() -> None:
    assert render().of_kind("ScrapeConfig") == []


def test_the_scrape_config_discovers_engines_from_the_control_plane_over_http() -> None:
    rendered = render(MONITORING_VALUES)
    spec = scrape_config(rendered)["spec"]
    (discovery,) = spec["httpSDConfigs"]
    assert discovery["url"] == f"http://{SERVICE}.inference.svc:50053{ENGINES_PATH}"
    assert discovery["refreshInterval"] == "15s"
    assert "tlsConfig" not in discovery
    assert (spec["metricsPath"], spec["scrapeInterval"]) == ("/metrics", "15s")
    assert {"targetLabel": "job", "replacement": ENGINE_JOB} in spec["relabelings"]
    assert scrape_config(rendered)["metadata"]["labels"]["release"] == "monitoring"
    service_ports, container_ports = ports_by_name(rendered)
    assert service_ports["http-sd"]["port"] == 50053
    assert service_ports["http-sd"]["targetPort"] == "http-sd"
    assert service_ports["http-sd"]["appProtocol"] == "http"
    assert container_ports["http-sd"]["containerPort"] == 50053
    assert control_plane_args(rendered).sd_port == 50053


def test_the_port_value_moves_the_url_the_service_the_container_and_the_flag_together() -> None:
    rendered = render(
        {**engines_on(interval="30s", refreshInterval="1m"), "controlPlane": {"httpSdPort": 9099}}
    )
    spec = scrape_config(rendered)["spec"]
    assert spec["httpSDConfigs"][0]["url"] == f"http://{SERVICE}.inference.svc:9099/sd/engines"
    assert (spec["scrapeInterval"], spec["httpSDConfigs"][0]["refreshInterval"]) == ("30s", "1m")
    service_ports, container_ports = ports_by_name(rendered)
    assert service_ports["http-sd"]["port"] == container_ports["http-sd"]["containerPort"] == 9099
    args = control_plane_args(rendered)
    assert (args.sd_port, args.port) == (9099, 50052)


def test_with_control_plane_tls_discovery_is_https_with_the_client_certificate() -> None:
    rendered = render(TLS_VALUES)
    (discovery,) = scrape_config(rendered)["spec"]["httpSDConfigs"]
    assert discovery["url"] == f"https://{SERVICE}.inference.svc:50053/sd/engines"
    assert discovery["tlsConfig"] == TLS_VALUES["monitoring"]["engines"]["tlsConfig"]
    service_ports, _ = ports_by_name(rendered)
    assert service_ports["http-sd"]["appProtocol"] == "https"
    args = control_plane_args(rendered)
    # The discovery endpoint is served with the gRPC port's certificate and client CA.
    assert args.sd_port == 50053 and args.tls_client_ca


@pytest.mark.parametrize(
    "tls_config",
    [
        pytest.param({}, id="none"),
        pytest.param({"ca": {"secret": {"name": "ca", "key": "ca.crt"}}}, id="ca-only"),
    ],
)
def test_tls_discovery_without_a_client_certificate_fails_the_render(
    tls_config: dict[str, Any],
) -> None:
    values = {**TLS_VALUES, **engines_on(tlsConfig=tls_config)}
    with pytest.raises(HelmError, match=r"monitoring\.engines\.tlsConfig a cert and keySecret"):
        render(values)


def test_prometheus_peers_reach_every_worker_port_and_the_discovery_port() -> None:
    rendered = render({"networkPolicy": {"prometheusFrom": PROMETHEUS}})
    workers = rendered.named("NetworkPolicy", "llm-orchestrator-engine-scrape")
    assert workers["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "ray-worker"
    )
    (rule,) = workers["spec"]["ingress"]
    assert rule["from"] == PROMETHEUS
    assert rule["ports"] == [{"protocol": "TCP"}]  # no port: all of them
    control_plane = rendered.named("NetworkPolicy", "llm-orchestrator-control-plane-sd")
    assert control_plane["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "control-plane"
    )
    (rule,) = control_plane["spec"]["ingress"]
    assert rule["from"] == PROMETHEUS
    assert rule["ports"] == [{"port": "http-sd", "protocol": "TCP"}]


def test_without_prometheus_peers_no_scrape_policy_is_rendered() -> None:
    names = {policy["metadata"]["name"] for policy in render().of_kind("NetworkPolicy")}
    assert names and not names & {
        "llm-orchestrator-engine-scrape",
        "llm-orchestrator-control-plane-sd",
    }


def test_a_discovery_port_equal_to_the_grpc_port_fails_the_render() -> None:
    with pytest.raises(HelmError, match=r"controlPlane\.httpSdPort: 50052 is controlPlane\.grpc"):
        render({"controlPlane": {"httpSdPort": 50052}})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            {"controlPlane": {"httpSdPort": 0}}, r"/controlPlane/httpSdPort.*minimum", id="port-0"
        ),
        pytest.param(
            {"controlPlane": {"httpSdPort": 65536}},
            r"/controlPlane/httpSdPort.*maximum",
            id="port-too-high",
        ),
        pytest.param(
            engines_on(refreshInterval="soon"),
            r"/monitoring/engines/refreshInterval",
            id="bad-refresh-interval",
        ),
        pytest.param(
            {"monitoring": {"engines": {"intervall": "15s"}}},
            r"additional properties 'intervall'",
            id="unknown-engines-key",
        ),
        pytest.param(
            {"networkPolicy": {"prometheusFrom": [{"namespace": "monitoring"}]}},
            r"/networkPolicy/prometheusFrom/0",
            id="not-a-peer",
        ),
    ],
)
def test_the_schema_refuses(values: dict[str, Any], message: str) -> None:
    with pytest.raises(HelmValuesError, match=message):
        validate_values(values)


def test_the_notes_warn_when_prometheus_is_kept_out_by_the_policies() -> None:
    warning = "networkPolicy.prometheusFrom is empty"
    assert warning in render(engines_on()).notes
    assert warning not in render(MONITORING_VALUES).notes
    assert "Engines: not scraped" in render().notes
