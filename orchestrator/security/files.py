"""Certificate, key and CA files: read them, and notice when they change on disk.

Rotation (cert-manager, a Kubernetes Secret update) replaces files in place or swaps a symlink,
so a change is "the (mtime, size, inode) of any file moved"; readers compare that signature and
re-read. A half-written rotation fails to load and the previous material stays in use.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.core.errors import ErrorCode, OrchestratorError

Signature = tuple[tuple[int, int, int], ...]


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """PEM bytes as read at one moment: `cert_chain` and `key` (empty on a client that presents
    no certificate), `ca` (empty when the peer is not verified against a private CA)."""

    cert_chain: bytes
    key: bytes
    ca: bytes


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where one side's TLS material lives.

    Server side: `cert` and `key` are required; `ca` given means peers must present a
    certificate signed by it (mutual TLS). Client side: `ca` verifies the server (None: the
    system's trust store); `cert` and `key` (both or neither) are the client's own certificate.
    `flag` prefixes the field names in error messages ("--tls", "--control-plane-tls") and
    `ca_role` names the CA file's flag after it ("client-ca" on a server, "ca" on a client).
    """

    cert: Path | None = None
    key: Path | None = None
    ca: Path | None = None
    flag: str = "--tls"
    ca_role: str = "ca"

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT,
                f"{self.flag}-cert and {self.flag}-key go together; give both or neither",
                param=f"{self.flag}-cert",
            )

    @property
    def has_identity(self) -> bool:
        """A certificate and key to present are configured."""
        return self.cert is not None

    def paths(self) -> tuple[Path, ...]:
        return tuple(p for p in (self.cert, self.key, self.ca) if p is not None)

    def signature(self) -> Signature:
        """What changes when any file is replaced; a missing file reads as (0, 0, 0)."""
        marks = []
        for path in self.paths():
            try:
                status = os.stat(path)
            except OSError:
                marks.append((0, 0, 0))
            else:
                marks.append((status.st_mtime_ns, status.st_size, status.st_ino))
        return tuple(marks)

    def read(self) -> TlsMaterial:
        """The files' bytes; a file that cannot be read raises `OrchestratorError` naming it."""
        return TlsMaterial(
            cert_chain=self._read(self.cert, "cert"),
            key=self._read(self.key, "key"),
            ca=self._read(self.ca, self.ca_role),
        )

    def _read(self, path: Path | None, role: str) -> bytes:
        if path is None:
            return b""
        try:
            data = path.read_bytes()
        except OSError as error:
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT,
                f"{self.flag}-{role}: cannot read {path}: {error.strerror or error}",
                param=f"{self.flag}-{role}",
            ) from None
        if b"-----BEGIN " not in data:
            raise OrchestratorError(
                ErrorCode.INVALID_ARGUMENT,
                f"{self.flag}-{role}: {path} holds no PEM block",
                param=f"{self.flag}-{role}",
            )
        return data
