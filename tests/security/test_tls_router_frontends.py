"""The router's HTTP and gRPC front ends over TLS, as `orchestrator router --tls-*` serves them:
plaintext is refused, the official OpenAI client works given our CA, and a rotated certificate is
served without a restart."""

from __future__ import annotations

import re
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import openai
import pytest
from cryptography import x509
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pki import Pki
from replica_server import replica

from orchestrator._proto.orchestrator.router.v1 import router_pb2 as pb
from orchestrator._proto.orchestrator.router.v1 import router_pb2_grpc as pb_grpc
from orchestrator.core.generations import Generation
from orchestrator.security.grpc_tls import channel_credentials
from orchestrator.security.http_tls import client_context
from orchestrator.sim.replica import ReplicaSettings

pytestmark = pytest.mark.slow
MODEL = "openai/gpt-oss-120b"
ROTATION_WAIT_S = 15.0


@dataclass(frozen=True)
class TlsRouter:
    https_port: int
    grpc_port: int


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def router(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRouter]:
    """`orchestrator router` over one instant replica, HTTPS and gRPC with our server cert."""
    with replica(ReplicaSettings(Generation.MI355X, time_scale=0.0, seed=3)) as upstream:
        replicas = tmp_path_factory.mktemp("router") / "replicas.yaml"
        replicas.write_text(
            "apiVersion: orchestrator/v1alpha1\nkind: Replicas\n"
            f"model: {MODEL}\nreplicas:\n"
            f'  - {{id: r0, url: "{upstream.url}", pool: p, site: lab, generation: MI355X, '
            "engine: sim}\n"
        )
        grpc_port = free_port()
        command = [
            sys.executable, "-m", "orchestrator", "--log-level", "WARNING", "router",
            "--config", str(replicas), "--port", "0", "--grpc-port", str(grpc_port),
            "--metrics-port", "0",
            "--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key),
        ]  # fmt: skip
        process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        try:
            https_port = _announced_port(process)
            yield TlsRouter(https_port, grpc_port)
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _announced_port(process: subprocess.Popen[str]) -> int:
    assert process.stderr is not None
    for line in process.stderr:
        found = re.search(r"router on https://127\.0\.0\.1:(\d+)", line)
        if found:
            return int(found.group(1))
    raise AssertionError(f"the router exited ({process.wait()}) without announcing its port")


def served_serial(port: int, ca: Path, *, alpn: str | None = None) -> int:
    """The serial number of the certificate a fresh TLS connection to `port` is served."""
    context = ssl.create_default_context(cafile=str(ca))
    if alpn is not None:
        context.set_alpn_protocols([alpn])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


def test_https_port_answers_plaintext_http_with_nothing(router: TlsRouter) -> None:
    with socket.create_connection(("127.0.0.1", router.https_port), timeout=5) as raw:
        raw.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        try:
            answer = raw.recv(4096)
        except ConnectionResetError:
            answer = b""
    assert not answer.startswith(b"HTTP/"), answer[:80]


def test_client_that_does_not_trust_our_ca_is_refused(router: TlsRouter) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        served_serial(router.https_port, Path(ssl.get_default_verify_paths().openssl_cafile))


def test_openai_client_streams_over_tls_given_the_ca(router: TlsRouter, pki: Pki) -> None:
    verify = client_context(pki.client_files(identity=False))
    with openai.DefaultHttpxClient(verify=verify, timeout=30) as http_client:
        client = openai.OpenAI(
            base_url=f"https://127.0.0.1:{router.https_port}/v1",
            api_key="unused",
            http_client=http_client,
        )
        assert [m.id for m in client.models.list()] == [MODEL]
        stream = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Hello over TLS"}],
            max_tokens=8,
            stream=True,
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text


def test_grpc_front_end_refuses_plaintext_and_serves_tls(router: TlsRouter, pki: Pki) -> None:
    target = f"127.0.0.1:{router.grpc_port}"
    with grpc.insecure_channel(target) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    credentials = channel_credentials(pki.client_files(identity=False))
    with grpc.secure_channel(target, credentials) as channel:
        models = pb_grpc.RouterServiceStub(channel).ListModels(pb.ListModelsRequest(), timeout=10)
    assert MODEL in [m.id for m in models.models]


def test_rotated_certificate_is_served_without_restart(router: TlsRouter, pki: Pki) -> None:
    before = pki.server
    assert served_serial(router.https_port, pki.ca.ca) == before.serial
    assert served_serial(router.grpc_port, pki.ca.ca, alpn="h2") == before.serial
    rotated = pki.ca.issue("server", server=True, into=before.cert.parent)
    assert rotated.cert == before.cert and rotated.serial != before.serial
    deadline = time.monotonic() + ROTATION_WAIT_S
    serials: tuple[int, int] = (before.serial, before.serial)
    while time.monotonic() < deadline:
        serials = (
            served_serial(router.https_port, pki.ca.ca),
            served_serial(router.grpc_port, pki.ca.ca, alpn="h2"),
        )
        if serials == (rotated.serial, rotated.serial):
            break
        time.sleep(0.2)
    assert serials == (rotated.serial, rotated.serial)
