"""gRPC credentials from `TlsFiles`: server credentials that follow certificate rotation, and
channel credentials for mutual TLS to the control plane.

gRPC asks the server's fetcher for a new certificate configuration at each new connection's
handshake; the fetcher answers only when the files changed (checked at most every `poll_s`), so a
rotated certificate serves new connections without a restart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import cast

import grpc

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.security.files import TlsFiles, TlsMaterial
from orchestrator.security.http_tls import DEFAULT_POLL_S, server_context

log = logging.getLogger(__name__)


def _configuration(material: TlsMaterial) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration(
        [(material.key, material.cert_chain)], root_certificates=material.ca or None
    )


def server_credentials(
    files: TlsFiles,
    *,
    poll_s: float = DEFAULT_POLL_S,
    clock: Callable[[], float] = time.monotonic,
) -> grpc.ServerCredentials:
    """TLS server credentials presenting `files.cert`; with `files.ca`, clients must present a
    certificate it signed (mutual TLS). Bad files raise `OrchestratorError` naming the flag."""
    if not files.has_identity:
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            f"{files.flag}-cert and {files.flag}-key are needed to serve TLS",
            param=f"{files.flag}-cert",
        )
    # An ssl context catches a key that does not match its certificate here, with a message,
    # where gRPC would only fail each handshake later.
    server_context(files)
    signature = files.signature()
    checked_s = clock()

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        nonlocal signature, checked_s
        now = clock()
        if now - checked_s < poll_s:
            return None
        checked_s = now
        current = files.signature()
        if current == signature:
            return None
        try:
            server_context(files)
            configuration = _configuration(files.read())
        except OrchestratorError as error:
            log.warning("TLS files changed but cannot be loaded yet: %s", error.message)
            return None
        signature = current
        log.info("gRPC TLS certificate reloaded from %s", files.cert)
        return configuration

    # gRPC reads None from the fetcher as "keep the current configuration"; its stubs omit that.
    fetcher = cast(Callable[[], grpc.ServerCertificateConfiguration], fetch)
    return grpc.dynamic_ssl_server_credentials(
        _configuration(files.read()), fetcher, require_client_authentication=files.ca is not None
    )


def aio_channel(
    target: str,
    tls: TlsFiles | None = None,
    options: Sequence[tuple[str, str | int]] | None = None,
) -> grpc.aio.Channel:
    """An asyncio channel to `target`: plaintext, or TLS (mutual when `tls` has a cert), with
    gRPC channel `options`. The files are read now, so a channel opened after a rotation
    presents the new certificate."""
    if tls is None:
        return grpc.aio.insecure_channel(target, options=options)
    return grpc.aio.secure_channel(target, channel_credentials(tls), options=options)


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    """Client credentials: verify the server against `files.ca` (None: the system's roots) and
    present `files.cert` when given. The files are read now; build new credentials to pick up
    a rotation (the watch client does, at every reconnect)."""
    material = files.read()
    return grpc.ssl_channel_credentials(
        root_certificates=material.ca or None,
        private_key=material.key or None,
        certificate_chain=material.cert_chain or None,
    )
