"""TLS files: bad ones are refused up front with the flag named; a rotation caught half-written
keeps the previous certificate serving until the files load again."""

from __future__ import annotations

import ssl

import pytest
from pki import Pki

from orchestrator.cli import main
from orchestrator.config.defaults import default_config_text
from orchestrator.config.errors import ConfigError
from orchestrator.config.loader import parse_config
from orchestrator.core.errors import OrchestratorError
from orchestrator.security.files import TlsFiles
from orchestrator.security.http_tls import ReloadingServerContext, server_context


def test_control_plane_refuses_tls_without_a_client_ca(
    pki: Pki, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(
        ["control-plane", "--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key)]
    )
    assert status == 2
    assert "--tls-client-ca is required" in capsys.readouterr().err


def test_certificate_without_its_key_is_refused_naming_the_flags(
    pki: Pki, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["router", "--config", "unused.yaml", "--tls-cert", str(pki.server.cert)])
    assert status == 2
    assert "--tls-cert and --tls-key go together" in capsys.readouterr().err


def test_key_of_another_certificate_is_refused(pki: Pki) -> None:
    with pytest.raises(OrchestratorError, match="--tls-cert/--tls-key") as refused:
        server_context(TlsFiles(pki.server.cert, pki.client.key))
    assert refused.value.param == "--tls-cert"


def test_missing_file_is_named(pki: Pki) -> None:
    missing = pki.server.cert.parent / "absent.pem"
    with pytest.raises(OrchestratorError, match=r"absent\.pem"):
        server_context(TlsFiles(missing, pki.server.key))


def test_mutual_tls_issues_no_session_tickets_so_every_client_is_verified_afresh(
    pki: Pki,
) -> None:
    mutual = server_context(pki.server_files(mutual=True))
    assert mutual.verify_mode == ssl.CERT_REQUIRED
    assert mutual.options & ssl.OP_NO_TICKET
    assert mutual.num_tickets == 0
    one_way = server_context(pki.server_files(mutual=False))
    assert not one_way.options & ssl.OP_NO_TICKET  # no client to re-verify: resumption is fine


def test_half_written_rotation_keeps_the_previous_certificate(
    pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> None:
    issued = pki.ca.issue("rotating", server=True, into=tmp_path_factory.mktemp("rotating"))
    now = [0.0]
    reloading = ReloadingServerContext(TlsFiles(issued.cert, issued.key), clock=lambda: now[0])
    first = reloading.current()
    issued.cert.write_bytes(b"-----BEGIN CERTIFICATE-----\ntruncated")
    now[0] += 5
    assert reloading.current() is first
    assert reloading.reloads == 0
    pki.ca.issue("rotating", server=True, into=issued.cert.parent)
    now[0] += 5
    assert reloading.current() is not first
    assert reloading.reloads == 1


def test_config_control_plane_tls_must_name_a_client_ca() -> None:
    text = default_config_text().replace(
        "controlPlane:", "controlPlane:\n  tls: {certFile: /tls/tls.crt, keyFile: /tls/tls.key}", 1
    )
    assert text != default_config_text()
    with pytest.raises(ConfigError, match=r"controlPlane\.tls") as refused:
        parse_config(text, source="test")
    assert "clientCaFile is required" in str(refused.value)
