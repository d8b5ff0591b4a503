"""A throwaway PKI per test module: our CA with a server and a client certificate, and a second,
unrelated CA with a client certificate of its own (the wrong one)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from pki import Pki, make_pki
from tls_replica import TlsReplicaThread


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def https_replica(pki: Pki) -> Iterator[TlsReplicaThread]:
    """A simulated HTTPS replica that wants a client certificate from `pki`'s CA."""
    server = TlsReplicaThread(pki).start()
    try:
        yield server
    finally:
        server.stop()
