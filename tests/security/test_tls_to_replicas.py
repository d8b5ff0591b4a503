"""Optional TLS from the router to its replicas: `orchestrator router --replica-tls-*` reaches an
`https://` replica that wants a client certificate; without our CA the router refuses to talk to
it and answers a clean 503 instead. Rotated replica TLS files are used by new connections."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from pki import Pki
from tls_replica import TlsReplicaThread

from orchestrator.forwarding.replica_connection import UpstreamError
from orchestrator.forwarding.upstream import TLS_CHECK_INTERVAL_S, UpstreamPool, UpstreamSettings
from orchestrator.security.files import TlsFiles

pytestmark = pytest.mark.slow
MODEL = "openai/gpt-oss-120b"


def router_over(replica_url: str, directory: Path, *flags: str) -> subprocess.Popen[str]:
    replicas = directory / "replicas.yaml"
    replicas.write_text(
        f"apiVersion: orchestrator/v1alpha1\nkind: Replicas\nmodel: {MODEL}\nreplicas:\n"
        f'  - {{id: r0, url: "{replica_url}", pool: p, site: lab, generation: MI355X, '
        "engine: sim}\n"
    )
    command = [
        sys.executable, "-m", "orchestrator", "--log-level", "WARNING", "router",
        "--config", str(replicas), "--port", "0", "--grpc-port", "0", "--metrics-port", "0", *flags,
    ]  # fmt: skip
    return subprocess.Popen(command, stderr=subprocess.PIPE, text=True)


def completion_status(router: subprocess.Popen[str]) -> tuple[int, dict[str, object]]:
    """Start-up announcement → port; then one completion through the router: status and body."""
    assert router.stderr is not None
    port = 0
    for line in router.stderr:
        found = re.search(r"router on http://127\.0\.0\.1:(\d+)", line)
        if found:
            port = int(found.group(1))
            break
    assert port, f"the router exited ({router.wait()}) without announcing its port"
    body = json.dumps({"model": MODEL, "prompt": "over TLS", "max_tokens": 4}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture
def stopped_after() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_router_with_our_ca_and_certificate_forwards_to_an_https_replica(
    https_replica: TlsReplicaThread,
    pki: Pki,
    tmp_path: Path,
    stopped_after: list[subprocess.Popen[str]],
) -> None:
    router = router_over(
        https_replica.url, tmp_path,
        "--replica-tls-ca", str(pki.ca.ca),
        "--replica-tls-cert", str(pki.client.cert),
        "--replica-tls-key", str(pki.client.key),
    )  # fmt: skip
    stopped_after.append(router)
    status, body = completion_status(router)
    assert status == 200, body
    assert body["choices"]


def test_router_that_does_not_trust_the_replica_answers_a_clean_503(
    https_replica: TlsReplicaThread, tmp_path: Path, stopped_after: list[subprocess.Popen[str]]
) -> None:
    router = router_over(https_replica.url, tmp_path)
    stopped_after.append(router)
    status, body = completion_status(router)
    assert status == 503, body
    error = body["error"]
    assert isinstance(error, dict) and "could take the request" in str(error["message"])


def rotate(source: Path, target: Path) -> None:
    """Replace `target` the way a Secret update does: a new file moved over the old one."""
    staged = target.with_suffix(".new")
    staged.write_bytes(source.read_bytes())
    os.replace(staged, target)


def test_rotated_replica_tls_files_are_used_by_the_next_new_connection(
    https_replica: TlsReplicaThread, pki: Pki, tmp_path: Path
) -> None:
    cert, key, ca = tmp_path / "router.crt", tmp_path / "router.key", tmp_path / "ca.crt"
    rotate(pki.stranger_client.cert, cert)
    rotate(pki.stranger_client.key, key)
    rotate(pki.stranger_ca.ca, ca)
    files = TlsFiles(cert, key, ca, flag="--replica-tls")

    async def models_status(pool: UpstreamPool) -> int | str:
        try:
            answer = await pool.get(
                https_replica.url, "/v1/models", timeout_s=10.0, connect_timeout_s=5.0
            )
        except UpstreamError as error:
            return type(error).__name__
        await answer.read()
        answer.close()  # never reused: each call opens a new connection
        return answer.status

    async def scenario() -> list[int | str]:
        pool = UpstreamPool(UpstreamSettings(replica_tls=files))
        await pool.start()
        try:
            seen = [await models_status(pool)]  # the replica is not signed by the stranger CA
            rotate(pki.ca.ca, ca)
            await asyncio.sleep(TLS_CHECK_INTERVAL_S + 0.1)
            seen.append(await models_status(pool))  # trusted now, but our certificate is not
            rotate(pki.client.cert, cert)
            rotate(pki.client.key, key)
            await asyncio.sleep(TLS_CHECK_INTERVAL_S + 0.1)
            seen.append(await models_status(pool))
            return seen
        finally:
            await pool.close()

    first, second, third = asyncio.run(scenario())
    assert first == "UpstreamConnectError"  # our side refused the replica's certificate
    assert isinstance(second, str)  # the replica refused the stranger's client certificate
    assert third == 200
