"""TLS in the chart: each hop's certificate files come from the Secret its value names, mounted
whole (no subPath, so rotation reaches the pod) and readable only by the pod's group; the flags
are the CLI's own (parsed with its parser); probes and the ServiceMonitor speak TLS where the
router does; the schema refuses half-configured TLS."""

from __future__ import annotations

import argparse
from pathlib import PurePosixPath
from typing import Any

import pytest
from chart import CHART, Rendered, render, validate_values, values_file
from helm_python import HelmError, HelmValuesError

from orchestrator.cli import build_parser

TLS_VALUES = values_file(CHART / "ci" / "tls-values.yaml")
SECRET_MODE = 0o440
CONTROL_PLANE_FLAGS = ("control_plane_tls_ca", "control_plane_tls_cert", "control_plane_tls_key")


REPLICA_FLAGS = ("replica_tls_ca", "replica_tls_cert", "replica_tls_key")


def pod_spec(rendered: Rendered, component: str) -> dict[str, Any]:
    deployment = rendered.named("Deployment", f"llm-orchestrator-{component}")
    return deployment["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def parsed(container: dict[str, Any]) -> argparse.Namespace:
    """The container's orchestrator command line as the CLI parses it."""
    argv = [*container.get("command", ()), *container.get("args", ())]
    start = argv.index("orchestrator", 1 if argv[0] == "/bin/sh" else 0)
    return build_parser().parse_args(argv[start + 1 :])


def secret_behind(spec: dict[str, Any], path: str) -> str:
    """The Secret a file path is read from: its directory must be a whole-Secret mount."""
    (container,) = spec["containers"]
    directory = str(PurePosixPath(path).parent)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == directory]
    assert "subPath" not in mount and "subPathExpr" not in mount, "rotation never reaches subPath"
    assert mount["readOnly"] is True
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    secret = volume["secret"]
    assert secret["defaultMode"] == SECRET_MODE
    assert "items" not in secret, "the whole Secret: tls.crt, tls.key and ca.crt as issued"
    assert spec["securityContext"]["fsGroup"] == container["securityContext"]["runAsGroup"], (
        "mode 0440 is readable through the pod's group"
    )
    return str(secret["secretName"])


def test_the_router_serves_tls_calls_the_control_plane_and_replicas_with_its_secrets() -> None:
    spec = pod_spec(render(TLS_VALUES), "router")
    (container,) = spec["containers"]
    args = parsed(container)
    sources = {
        flag: (getattr(args, flag).name, secret_behind(spec, str(getattr(args, flag))))
        for flag in (
            "tls_cert", "tls_key", "tls_client_ca", *CONTROL_PLANE_FLAGS,
            "replica_tls_ca", "replica_tls_cert", "replica_tls_key",
        )
    }  # fmt: skip
    assert sources == {
        "tls_cert": ("tls.crt", "orchestrator-router-tls"),
        "tls_key": ("tls.key", "orchestrator-router-tls"),
        "tls_client_ca": ("ca.crt", "orchestrator-client-ca"),
        "control_plane_tls_ca": ("ca.crt", "orchestrator-control-plane-client-tls"),
        "control_plane_tls_cert": ("tls.crt", "orchestrator-control-plane-client-tls"),
        "control_plane_tls_key": ("tls.key", "orchestrator-control-plane-client-tls"),
        "replica_tls_ca": ("ca.crt", "orchestrator-replica-tls"),
        "replica_tls_cert": ("tls.crt", "orchestrator-replica-tls"),
        "replica_tls_key": ("tls.key", "orchestrator-replica-tls"),
    }
    assert args.control_plane == "llm-orchestrator-control-plane:50052", (
        "the name the control plane's certificate must carry"
    )


def test_the_control_plane_serves_mutual_tls_from_its_server_secret() -> None:
    spec = pod_spec(render(TLS_VALUES), "control-plane")
    (container,) = spec["containers"]
    args = parsed(container)
    sources = {
        flag: (getattr(args, flag).name, secret_behind(spec, str(getattr(args, flag))))
        for flag in ("tls_cert", "tls_key", "tls_client_ca")
    }
    assert sources == {
        "tls_cert": ("tls.crt", "orchestrator-control-plane-tls"),
        "tls_key": ("tls.key", "orchestrator-control-plane-tls"),
        "tls_client_ca": ("ca.crt", "orchestrator-control-plane-tls"),
    }
    assert container["readinessProbe"] == {"tcpSocket": {"port": "grpc"}, "periodSeconds": 5}


def test_the_control_plane_checks_https_external_replicas_with_the_replica_secret() -> None:
    spec = pod_spec(render(TLS_VALUES), "control-plane")
    args = parsed(spec["containers"][0])
    sources = {
        flag: (getattr(args, flag).name, secret_behind(spec, str(getattr(args, flag))))
        for flag in REPLICA_FLAGS
    }
    assert sources == {
        "replica_tls_ca": ("ca.crt", "orchestrator-replica-tls"),
        "replica_tls_cert": ("tls.crt", "orchestrator-replica-tls"),
        "replica_tls_key": ("tls.key", "orchestrator-replica-tls"),
    }
    ca_only = {"replicaTls": {"existingSecret": "replica-ca"}}
    spec = pod_spec(render(ca_only), "control-plane")
    args = parsed(spec["containers"][0])
    assert secret_behind(spec, str(args.replica_tls_ca)) == "replica-ca"
    assert args.replica_tls_cert is None and args.replica_tls_key is None


def test_every_caller_of_the_control_plane_presents_the_client_certificate() -> None:
    """Whatever dials the control plane (routers; the exporters reporting node health; the
    operator commands NOTES shows, run in the control plane's pod) has a client Secret mounted:
    the exporters on every GPU node their own, health-only one, never the routers'; nothing
    dials it in plaintext."""
    rendered = render(TLS_VALUES)
    callers = {}
    for label, template in rendered.pod_templates():
        spec = template["spec"]
        for container in spec["containers"]:
            argv = [*container.get("command", ()), *container.get("args", ())]
            if any(arg.startswith("--control-plane=") for arg in argv):
                args = parsed(container)
                (secret,) = {
                    secret_behind(spec, str(getattr(args, f))) for f in CONTROL_PLANE_FLAGS
                }
                callers[label] = secret
    assert callers == {
        "DaemonSet/llm-orchestrator-exporter-kr": "orchestrator-control-plane-exporter-tls",
        "DaemonSet/llm-orchestrator-exporter-us": "orchestrator-control-plane-exporter-tls",
        "Deployment/llm-orchestrator-router": "orchestrator-control-plane-client-tls",
    }
    router = parsed(pod_spec(rendered, "router")["containers"][0])
    client_dir = PurePosixPath(str(router.control_plane_tls_cert)).parent
    notes_command = next(
        line for line in rendered.notes.splitlines() if "orchestrator status" in line
    )
    assert "--control-plane llm-orchestrator-control-plane:50052" in notes_command
    assert f"--control-plane-tls-cert {client_dir}/tls.crt" in rendered.notes
    control_plane = pod_spec(rendered, "control-plane")
    assert secret_behind(control_plane, f"{client_dir}/tls.crt") == (
        "orchestrator-control-plane-client-tls"
    )


@pytest.mark.parametrize(
    ("identity", "expected"),
    [("", "llm-orchestrator-exporter"), ("gpu-node-reporter", "gpu-node-reporter")],
)
def test_the_control_plane_lets_the_exporters_identity_only_report_health(
    identity: str, expected: str
) -> None:
    """The exporters' certificate name is health-only on the control plane (default
    `<fullname>-exporter`), and it is not the identity any router presents."""
    values = {**TLS_VALUES, "controlPlane": {"tls": {**TLS_VALUES["controlPlane"]["tls"]}}}
    values["controlPlane"]["tls"]["exporterIdentity"] = identity
    (container,) = pod_spec(render(values), "control-plane")["containers"]
    assert parsed(container).tls_health_only_client == [expected]


def test_without_tls_values_nothing_is_mounted_and_everything_is_plaintext() -> None:
    rendered = render()
    for component in ("router", "control-plane"):
        spec = pod_spec(rendered, component)
        assert not [v for v in spec["volumes"] if "secret" in v], component
        args = parsed(spec["containers"][0])
        assert args.tls_cert is None and args.tls_client_ca is None, component
        assert args.replica_tls_ca is None, component
    router = parsed(pod_spec(rendered, "router")["containers"][0])
    assert router.control_plane_tls_ca is None
    for daemonset in rendered.of_kind("DaemonSet"):
        spec = daemonset["spec"]["template"]["spec"]
        assert not [v for v in spec["volumes"] if "secret" in v]
        exporter = parsed(spec["containers"][0])
        assert exporter.control_plane and exporter.control_plane_tls_cert is None
    assert "curl http://" in rendered.notes


@pytest.mark.parametrize(
    ("router_tls", "probe"),
    [
        pytest.param({}, {"httpGet": {"path": "/health", "port": "http"}}, id="plaintext"),
        pytest.param(
            {"existingSecret": "router-tls"},
            {"httpGet": {"path": "/health", "port": "http", "scheme": "HTTPS"}},
            id="tls",
        ),
        pytest.param(
            {"existingSecret": "router-tls", "clientCaSecret": "client-ca"},
            {"tcpSocket": {"port": "http"}},
            id="client-certificates-required",
        ),
    ],
)
def test_the_routers_readiness_probe_speaks_its_protocol(
    router_tls: dict[str, str], probe: dict[str, Any]
) -> None:
    spec = pod_spec(render({"router": {"tls": router_tls}}), "router")
    assert spec["containers"][0]["readinessProbe"] == {**probe, "periodSeconds": 5}


def test_the_service_monitor_scrapes_the_tls_router_over_https_with_its_tls_config() -> None:
    (monitor,) = render(TLS_VALUES).of_kind("ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == TLS_VALUES["monitoring"]["serviceMonitor"]["tlsConfig"]
    plaintext = {"monitoring": {"serviceMonitor": {"enabled": True}}}
    (monitor,) = render(plaintext).of_kind("ServiceMonitor")
    assert "scheme" not in monitor["spec"]["endpoints"][0]


def test_a_service_monitor_without_a_client_certificate_fails_when_the_router_requires_one() -> (
    None
):
    values = {
        "router": {"tls": {"existingSecret": "router-tls", "clientCaSecret": "client-ca"}},
        "monitoring": {"serviceMonitor": {"enabled": True}},
    }
    with pytest.raises(
        HelmError, match=r"monitoring\.serviceMonitor\.tlsConfig a cert and keySecret"
    ):
        render(values)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            {"controlPlane": {"tls": {"enabled": True}}},
            # Both, in whichever order the schema validator reports them.
            r"(?s)(?=.*/controlPlane/tls/clientSecret.*minLength)"
            r"(?=.*/controlPlane/tls/serverSecret)",
            id="control-plane-tls-without-secrets",
        ),
        pytest.param(
            {"controlPlane": {"tls": {"enabled": True, "serverSecret": "cp-tls"}}},
            r"/controlPlane/tls/clientSecret.*minLength",
            id="control-plane-tls-without-client-secret",
        ),
        pytest.param(
            {"controlPlane": {"tls": {"enabled": True, "serverSecret": "a", "clientSecret": "b"}}},
            r"/controlPlane/tls/exporterClientSecret.*minLength",
            id="control-plane-tls-without-the-exporters-secret",
        ),
        pytest.param(
            {"router": {"tls": {"clientCaSecret": "client-ca"}}},
            r"/router/tls/existingSecret.*minLength",
            id="client-ca-without-a-server-certificate",
        ),
        pytest.param(
            {"replicaTls": {"clientCertificate": True}},
            r"/replicaTls/existingSecret.*minLength",
            id="replica-client-certificate-without-a-secret",
        ),
        pytest.param(
            {"router": {"tls": {"existingSecret": "Router_TLS"}}},
            r"/router/tls/existingSecret.*does not match pattern",
            id="not-a-secret-name",
        ),
        pytest.param(
            {"controlPlane": {"tls": {"enabled": True, "severSecret": "x"}}},
            r"additional properties 'severSecret'",
            id="misspelt-key",
        ),
    ],
)
def test_the_schema_refuses_half_configured_tls(values: dict[str, Any], message: str) -> None:
    with pytest.raises(HelmValuesError, match=message):
        validate_values(values)
    with pytest.raises(HelmValuesError):
        render(values)


def test_control_plane_tls_off_needs_no_secrets() -> None:
    validate_values({"controlPlane": {"tls": {"enabled": False}}})


def test_exporters_that_report_no_health_need_no_client_secret() -> None:
    tls = {"enabled": True, "serverSecret": "a", "clientSecret": "b"}
    validate_values({"controlPlane": {"tls": tls}, "exporter": {"reportHealth": False}})
    validate_values({"controlPlane": {"tls": tls}, "exporter": {"enabled": False}})
