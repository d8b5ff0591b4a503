"""`ssl.SSLContext`s for the HTTP side: a server context that follows certificate rotation, and
client contexts for TLS to replicas.

The listening socket keeps the context it was created with, so rotation cannot replace it; instead
its `sni_callback`, which OpenSSL runs on every ClientHello (with or without SNI), moves each new
connection onto the newest context built from the files. Connections already open keep theirs.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable

from orchestrator.core.errors import ErrorCode, OrchestratorError
from orchestrator.security.files import Signature, TlsFiles

log = logging.getLogger(__name__)

DEFAULT_POLL_S = 1.0


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """A TLS 1.2+ server context presenting `files.cert`; with `files.ca`, peers must present a
    certificate it signed. Bad files raise `OrchestratorError` naming the flag."""
    if not files.has_identity:
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            f"{files.flag}-cert and {files.flag}-key are needed to serve TLS",
            param=f"{files.flag}-cert",
        )
    files.read()  # readable PEM, or an error naming the file
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_identity(context, files)
    if files.ca is not None:
        _load_ca(context, files)
        context.verify_mode = ssl.CERT_REQUIRED
        # A resumed session skips the client-certificate check, so a client whose CA was
        # rotated out could go on resuming; no tickets: every connection is verified afresh.
        context.options |= ssl.OP_NO_TICKET
        context.num_tickets = 0
    return context


def client_context(files: TlsFiles) -> ssl.SSLContext:
    """A TLS 1.2+ client context that verifies the server (against `files.ca`, else the system's
    trust store) and presents `files.cert` when given."""
    files.read()
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if files.ca is not None:
        _load_ca(context, files)
    if files.has_identity:
        _load_identity(context, files)
    return context


class ReloadingServerContext:
    """A server context whose certificate, key and client CA follow the files on disk.

    Serve with `.context`. At most every `poll_s` seconds, a handshake checks whether the files
    changed and, if they did, builds a fresh context from them; a rotation caught half-written
    is logged and retried at the next check, the previous context serving meanwhile.
    """

    def __init__(
        self,
        files: TlsFiles,
        *,
        poll_s: float = DEFAULT_POLL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.files = files
        self.poll_s = poll_s
        self._clock = clock
        self._signature: Signature = files.signature()
        self._checked_s = clock()
        self.reloads = 0
        # The listening context; later ones are only ever swapped in by its callback.
        self.context = self._current = server_context(files)
        self.context.sni_callback = self._on_hello

    def current(self) -> ssl.SSLContext:
        """The newest context, re-checking the files if `poll_s` passed since the last check."""
        now = self._clock()
        if now - self._checked_s >= self.poll_s:
            self._checked_s = now
            signature = self.files.signature()
            if signature != self._signature:
                try:
                    fresh = server_context(self.files)
                except (OrchestratorError, ssl.SSLError, OSError) as error:
                    log.warning("TLS files changed but cannot be loaded yet: %s", error)
                else:
                    self._current, self._signature = fresh, signature
                    self.reloads += 1
                    log.info("TLS certificate reloaded from %s", self.files.cert)
        return self._current

    def _on_hello(
        self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: object
    ) -> None:
        connection.context = self.current()


def _load_identity(context: ssl.SSLContext, files: TlsFiles) -> None:
    try:
        context.load_cert_chain(str(files.cert), str(files.key))
    except (ssl.SSLError, OSError) as error:
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            f"{files.flag}-cert/{files.flag}-key: {files.cert} and {files.key} do not load as a "
            f"certificate chain and its private key: {error}",
            param=f"{files.flag}-cert",
        ) from None


def _load_ca(context: ssl.SSLContext, files: TlsFiles) -> None:
    try:
        context.load_verify_locations(cafile=str(files.ca))
    except (ssl.SSLError, OSError) as error:
        raise OrchestratorError(
            ErrorCode.INVALID_ARGUMENT,
            f"{files.flag}-{files.ca_role}: {files.ca} does not load as CA certificates: {error}",
            param=f"{files.flag}-{files.ca_role}",
        ) from None
